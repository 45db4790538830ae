"""`transformer`: a Transformer encoder from Keras layers, for images (as ViT) or tokens.

Where float16 bites in a Transformer, and what this encoder does about it (read from the
installed Keras source):
- LayerNormalization: Keras computes mean and variance in float32 whatever the policy
  (`ops.layer_normalization` upcasts half-precision inputs), so the variance of activations
  above ~256 (squares above float16's 65504) does not overflow. Nothing to add.
- The attention softmax: without dropout, Keras' MultiHeadAttention calls
  `ops.dot_product_attention`, whose TensorFlow version computes logits and softmax in
  float32. With dropout it takes an explicit path whose Softmax layer has the attention
  layer's policy, i.e. float16 under mixed_float16 (a long sequence's probabilities lose most
  of their digits, and a masked position, -3e4 in float16, sits close to float16's limit);
  `Float32SoftmaxAttention` runs that one in float32 too.
- The residual stream: pre-LayerNorm blocks (normalise, then attention or MLP, then add)
  keep every block's input normalised, so attention scores and MLP activations stay in range
  however large the residual stream grows; a final LayerNorm does the same for the head.
- Logits and loss: mptrain's head ends in a float32 Activation, so softmax and cross-entropy
  are float32.
"""

from __future__ import annotations

import math

from mptrain.config.kinds import TransformerConfig
from mptrain.data.dataset import InputSpec
from mptrain.errors import ConfigError
from mptrain.model.kinds import ModelKind

DEFAULT_PATCH = 4


class Transformer(ModelKind, kind="transformer"):
    def check_fits(self, cfg: TransformerConfig, spec: InputSpec) -> None:
        """Image size vs patch size, vocabulary vs the data's tokens: errors naming the key."""
        if spec.kind == "image":
            patch = cfg.patch_size or DEFAULT_PATCH
            height, width = spec.shape[:2]
            if height % patch or width % patch:
                raise ConfigError(f"model.patch_size {patch} does not divide the {height}x{width} "
                                  "images; choose a divisor of both sides")
        elif spec.kind == "tokens":
            if None not in (cfg.vocab_size, spec.vocab_size) and cfg.vocab_size < spec.vocab_size:
                raise ConfigError(f"model.vocab_size {cfg.vocab_size} is smaller than the data's "
                                  f"vocabulary ({spec.vocab_size} token ids); raise it or set it to "
                                  "null (taken from the data)")
            if cfg.sequence_length is not None and cfg.sequence_length != spec.shape[0]:
                raise ConfigError(f"model.sequence_length {cfg.sequence_length} differs from the "
                                  f"data's sequences ({spec.shape[0]} tokens); set it to null or "
                                  f"{spec.shape[0]}")
            if cfg.vocab_size is None and spec.vocab_size is None:
                raise ConfigError("model.vocab_size is needed: this data set does not say how many "
                                  "token ids it uses")
        else:
            raise ConfigError(f"model.kind transformer needs images (height, width, channels) or "
                              f"token ids (length,); this data set's examples have shape {spec.shape}")

    def build(self, config, spec, objective, train_inputs=None):
        import keras
        from keras import layers

        from mptrain.model.kinds.basic import augmentation, head
        from mptrain.model.layers import Float32SoftmaxAttention, PositionEmbedding

        cfg: TransformerConfig = config.model
        notes = []
        if spec.kind == "image":
            inputs = keras.Input(shape=spec.shape, name="inputs")
            patch = cfg.patch_size or DEFAULT_PATCH
            x = augmentation(inputs, config.data)
            x = layers.Conv2D(cfg.embed_dim, patch, strides=patch, name="patch_embedding")(x)
            x = layers.Reshape((-1, cfg.embed_dim), name="patches")(x)
            notes.append(f"images cut into {x.shape[1]} patches of {patch}x{patch} pixels")
        else:
            inputs = keras.Input(shape=spec.shape, dtype="int32", name="token_ids")
            vocab = cfg.vocab_size or spec.vocab_size
            x = layers.Embedding(vocab, cfg.embed_dim, mask_zero=True, name="token_embedding")(inputs)
        x = PositionEmbedding(name="position_embedding")(x)
        if cfg.dropout:
            x = layers.Dropout(cfg.dropout, name="embedding_dropout")(x)
        for i in range(1, cfg.num_layers + 1):
            h = layers.LayerNormalization(epsilon=1e-6, name=f"block_{i}_attention_norm")(x)
            h = Float32SoftmaxAttention(cfg.num_heads, cfg.embed_dim // cfg.num_heads,
                                        dropout=cfg.dropout, name=f"block_{i}_attention")(h, h)
            x = layers.Add(name=f"block_{i}_attention_residual")([x, h])
            h = layers.LayerNormalization(epsilon=1e-6, name=f"block_{i}_mlp_norm")(x)
            h = layers.Dense(cfg.mlp_dim, activation="gelu", name=f"block_{i}_mlp_in")(h)
            h = layers.Dense(cfg.embed_dim, name=f"block_{i}_mlp_out")(h)
            if cfg.dropout:
                h = layers.Dropout(cfg.dropout, name=f"block_{i}_mlp_dropout")(h)
            x = layers.Add(name=f"block_{i}_mlp_residual")([x, h])
        x = layers.LayerNormalization(epsilon=1e-6, name="final_norm")(x)
        outputs = head(x, cfg, objective)
        return keras.Model(inputs, outputs, name="transformer"), notes

    def parameters_and_activations(self, config, spec):
        cfg, batch = config.model, config.train.batch_size
        tokens = spec.shape[0] if spec.kind == "tokens" else math.prod(spec.shape) // (
            spec.shape[2] or 1) // ((cfg.patch_size or DEFAULT_PATCH) ** 2)
        per_block = 4 * cfg.embed_dim ** 2 + 2 * cfg.embed_dim * cfg.mlp_dim
        vocab = (cfg.vocab_size or spec.vocab_size or 0) * cfg.embed_dim
        params = cfg.num_layers * per_block + vocab + tokens * cfg.embed_dim
        return params, batch * tokens * cfg.num_layers * (6 * cfg.embed_dim + cfg.mlp_dim
                                                           + cfg.num_heads * tokens)

    def resize_hint(self, layer: str, what: str) -> str:
        return ("change model.embed_dim / model.num_heads / model.mlp_dim"
                if "vocabulary" not in what else "change data.max_tokens or model.vocab_size")

