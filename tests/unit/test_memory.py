"""`mptrain memory`'s figures, on recorded numbers (nothing trains)."""


def test_the_largest_batch_is_never_more_hopeful_than_the_measurement():
    """A measured peak above the estimate (XLA's buffers under mixed_float16 on a CPU: 72 MiB
    measured where 26 MiB was estimated) scales every part up by that ratio; a batch far
    beyond the data set is said to be a memory figure only."""
    from mptrain.measure.memory import MemoryPlan, with_largest_batch

    mib = 2**20
    parts = {"policy": "mixed_float16", "batch_size": 100, "parameters": 1000,
             "weights_bytes": 4 * mib, "weight_copies_bytes": 2 * mib, "gradients_bytes": 4 * mib,
             "optimizer_bytes": 8 * mib, "activations_bytes": 8 * mib, "total_bytes": 26 * mib}
    estimated = with_largest_batch(MemoryPlan(**parts), available=1000 * mib, examples=60_000)
    measured = with_largest_batch(MemoryPlan(**parts, measured_peak_bytes=72 * mib),
                                   available=1000 * mib, examples=60_000)
    per_example = 8 * mib / 100
    assert estimated.largest_batch == int((800 * mib - 18 * mib) // per_example)
    assert estimated.largest_batch_basis == "estimate" and estimated.note is None
    assert measured.largest_batch == int((800 * mib * 26 / 72 - 18 * mib) // per_example)
    assert measured.largest_batch_basis == "measured"
    assert measured.largest_batch < estimated.largest_batch / 2
    tiny = with_largest_batch(MemoryPlan(**parts), available=1000 * mib, examples=500)
    assert "memory figure only" in tiny.note and "500 training examples" in tiny.note


def test_why_16_bits_do_not_halve_memory_names_the_optimizers_state():
    """The experiment's optimizer with its measured state per weight; a model's own
    optimizers, whose state its first step builds, said as left out of the estimate."""
    from mptrain.measure.memory import why_not_half

    assert "(adam keeps 2 float32 values per weight)" in why_not_half("adam", 2.0)
    assert "(sgd keeps none)" in why_not_half("sgd", 0.0)
    own = why_not_half("d_optimizer, g_optimizer", None)
    assert "(d_optimizer, g_optimizer (the model's own) are built by its first step: the " \
           "estimate leaves their state out, the measured peak holds it)" in own
