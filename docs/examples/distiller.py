"""Knowledge distillation as keras.io writes it ("Knowledge Distillation", Hinton et al.
2015): a `Distiller` model holding a teacher and a student, with a compile of its own
(optimizer, metrics, student_loss_fn, distillation_loss_fn, alpha, temperature) and its own
`train_step` and `test_step`. Only the student is trained; the teacher's forward pass gives
its softened targets. The one line keras.io's step lacks for mixed_float16 is marked: the
loss scaled by the optimizer that applies its gradients (every other policy's `scale_loss`
returns the loss as it is)."""

import keras
import tensorflow as tf
from keras import layers


class Distiller(keras.Model):
    def __init__(self, student, teacher):
        super().__init__()
        self.teacher = teacher
        self.student = student

    def compile(self, optimizer, metrics, student_loss_fn, distillation_loss_fn, alpha=0.1,
                temperature=3):
        super().compile(optimizer=optimizer, metrics=metrics)
        self.student_loss_fn = student_loss_fn
        self.distillation_loss_fn = distillation_loss_fn
        self.alpha = alpha
        self.temperature = temperature

    def train_step(self, data):
        x, y = data
        teacher_predictions = self.teacher(x, training=False)
        with tf.GradientTape() as tape:
            student_predictions = self.student(x, training=True)
            student_loss = self.student_loss_fn(y, student_predictions)
            distillation_loss = self.distillation_loss_fn(
                tf.nn.softmax(teacher_predictions / self.temperature, axis=1),
                tf.nn.softmax(student_predictions / self.temperature, axis=1))
            loss = self.alpha * student_loss + (1 - self.alpha) * distillation_loss
            scaled = self.optimizer.scale_loss(loss)  # for mixed_float16's loss scaling
        gradients = tape.gradient(scaled, self.student.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.student.trainable_variables, strict=True))
        self.compute_metrics(x, y, student_predictions, sample_weight=None)
        results = {m.name: m.result() for m in self.metrics}
        results.update({"student_loss": student_loss, "distillation_loss": distillation_loss})
        return results

    def test_step(self, data):
        x, y = data
        y_prediction = self.student(x, training=False)
        student_loss = self.student_loss_fn(y, y_prediction)
        self.compute_metrics(x, y, y_prediction, sample_weight=None)
        results = {m.name: m.result() for m in self.metrics}
        results.update({"student_loss": student_loss})
        return results

    def call(self, x):
        return self.student(x)


def convnet(input_shape, num_classes, width, name):
    return keras.Sequential([
        keras.Input(shape=input_shape),
        layers.Conv2D(width, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.MaxPooling2D(pool_size=(2, 2), strides=(1, 1), padding="same"),
        layers.Conv2D(2 * width, (3, 3), strides=(2, 2), padding="same"),
        layers.Flatten(),
        layers.Dense(num_classes),  # logits
    ], name=name)


def build(input_shape, num_classes, teacher=None, teacher_width=64, student_width=8):
    """The distiller, compiled as keras.io compiles it. `teacher`: a trained teacher's
    .keras file (it must return logits: an mptrain run with model.output_activation:
    linear saves one); None: an untrained teacher of keras.io's shape, to try the pipeline."""
    teacher = (keras.models.load_model(teacher) if teacher else
               convnet(input_shape, num_classes, teacher_width, "teacher"))
    student = convnet(input_shape, num_classes, student_width, "student")
    distiller = Distiller(student=student, teacher=teacher)
    distiller.compile(
        optimizer=keras.optimizers.Adam(),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
        student_loss_fn=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        distillation_loss_fn=keras.losses.KLDivergence(),
        alpha=0.1,
        temperature=10,
    )
    return distiller
