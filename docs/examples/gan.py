"""A GAN as keras.io writes it ("DCGAN overriding Model.train_step"): a compile of its own
with two optimizers (`d_optimizer`, `g_optimizer`) and a loss function, metrics of its own
behind a `metrics` property, and a `train_step` on images alone (no labels: the experiment
says `data.labels: false`, or an .npz holds x_train and x_test only). The lines keras.io's
step lacks for mixed_float16 are marked: each loss scaled by the optimizer that applies its
gradients (every other policy's `scale_loss` returns the loss as it is)."""

import keras
import tensorflow as tf
from keras import layers, ops


class GAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.seed_generator = keras.random.SeedGenerator(1337)

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn
        self.d_loss_metric = keras.metrics.Mean(name="d_loss")
        self.g_loss_metric = keras.metrics.Mean(name="g_loss")

    @property
    def metrics(self):
        return [self.d_loss_metric, self.g_loss_metric]

    def train_step(self, real_images):
        batch_size = ops.shape(real_images)[0]
        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        generated_images = self.generator(random_latent_vectors)
        combined_images = ops.concatenate([generated_images, real_images], axis=0)
        labels = ops.concatenate([ops.ones((batch_size, 1)), ops.zeros((batch_size, 1))], axis=0)
        labels += 0.05 * tf.random.uniform(tf.shape(labels))
        with tf.GradientTape() as tape:
            predictions = self.discriminator(combined_images)
            d_loss = self.loss_fn(labels, predictions)
            scaled = self.d_optimizer.scale_loss(d_loss)  # for mixed_float16's loss scaling
        grads = tape.gradient(scaled, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights, strict=True))

        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        misleading_labels = ops.zeros((batch_size, 1))
        with tf.GradientTape() as tape:
            predictions = self.discriminator(self.generator(random_latent_vectors))
            g_loss = self.loss_fn(misleading_labels, predictions)
            scaled = self.g_optimizer.scale_loss(g_loss)  # for mixed_float16's loss scaling
        grads = tape.gradient(scaled, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights, strict=True))

        self.d_loss_metric.update_state(d_loss)
        self.g_loss_metric.update_state(g_loss)
        return {"d_loss": self.d_loss_metric.result(), "g_loss": self.g_loss_metric.result()}


def build(input_shape, latent_dim=128, width=64):
    """keras.io's discriminator and generator for images of `input_shape` (28x28x1 there;
    height and width divisible by 4), the GAN compiled as keras.io compiles it."""
    height, width_px, channels = input_shape
    discriminator = keras.Sequential([
        keras.Input(shape=input_shape),
        layers.Conv2D(width, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2D(2 * width, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.GlobalMaxPooling2D(),
        layers.Dense(1),
    ], name="discriminator")
    generator = keras.Sequential([
        keras.Input(shape=(latent_dim,)),
        layers.Dense(height // 4 * width_px // 4 * 2 * width),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Reshape((height // 4, width_px // 4, 2 * width)),
        layers.Conv2DTranspose(2 * width, (4, 4), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2DTranspose(2 * width, (4, 4), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2D(channels, (7, 7), padding="same", activation="sigmoid"),
    ], name="generator")
    gan = GAN(discriminator=discriminator, generator=generator, latent_dim=latent_dim)
    gan.compile(
        d_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
        g_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
        loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    return gan
