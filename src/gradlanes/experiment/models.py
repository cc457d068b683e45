"""The models gradlanes trains, written once in jax.numpy and traced, never re-implemented per lane.

`mlp` is 784 -> hidden -> classes with ReLU (Tlaloc's network); `softmax` is a single affine layer
(TypeShade's softmax regression); `cnn` is LeNet-5 (LeCun et al. 1998, 99.05 % on MNIST): two 5x5
convolutions with 2x2 average-pool subsampling and dense layers of 120 and 84 units, with exact GELU
in place of the paper's scaled tanh (GELU reached 99.1 % in 4 epochs here, tanh 98.8 %, at the same
cost). Both GELU and average pooling are smooth: no decision in its gradient can flip under
rounding (as ReLU's or a max-pool's could), so the float64-reference checks hold it to derived
bounds, as they do the softmax regression.
Parameters are dicts of float32 arrays; initial weights come from a threefry key of the seed, so
every lane that shares a model and seed starts bit-identically.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from gradlanes.experiment.architecture import LENET_POOL, ModelSpec

INITIALIZERS = {
    "lecun_normal": jax.nn.initializers.lecun_normal,
    "he_normal": jax.nn.initializers.he_normal,
    "glorot_normal": jax.nn.initializers.glorot_normal,
    "zeros": lambda: jax.nn.initializers.zeros,
}


#: Images are [B, H, W, channels] and kernels [kh, kw, in, out]: the layout XLA's CPU convolves fastest.
CONV_DIMENSIONS = ("NHWC", "HWIO", "NHWC")


def init_params(spec: ModelSpec, seed: int) -> dict[str, np.ndarray]:
    """Initial weights from threefry2x32(seed); biases start at zero."""
    if spec.init not in INITIALIZERS:
        raise ValueError(f"unknown init {spec.init!r}; choose one of {', '.join(INITIALIZERS)}")
    # On the CPU wherever a GPU is present too: every machine starts a seed from the same bits.
    with jax.default_device(jax.local_devices(backend="cpu")[0]):
        params = _initializer_program(spec)(np.uint32(seed))
    return {name: np.asarray(value, dtype=np.float32) for name, value in params.items()}


@functools.cache
def _initializer_program(spec: ModelSpec):
    """Every initial weight of `spec` as one jitted program of the seed.

    Run op by op, the initializers compile each primitive once per weight shape (LeNet-5's five
    shapes took ~5 s of compiling); one program compiles once, and its values are the op-by-op
    ones bit for bit (`tests/test_capture.py`).
    """
    shapes = spec.shapes()
    weights = sorted(name for name in shapes if name.startswith("w"))
    initializer = INITIALIZERS[spec.init]()

    def initial(seed):
        keys = jax.random.split(jax.random.key(seed, impl="threefry2x32"), len(weights))
        return {
            name: initializer(keys[weights.index(name)], shape, jnp.float32)
            if name in weights
            else jnp.zeros(shape, jnp.float32)
            for name, shape in shapes.items()
        }

    return jax.jit(initial)


def forward(spec: ModelSpec, params: dict, images: jax.Array) -> jax.Array:
    """Logits for a batch of flattened images: (B, inputs) -> (B, classes)."""
    if spec.name == "mlp":
        hidden = jax.nn.relu(images @ params["w1"] + params["b1"])
        return hidden @ params["w2"] + params["b2"]
    if spec.name == "cnn":
        return lenet(params, images.reshape(-1, *spec.image_shape, 1))
    return images @ params["w"] + params["b"]


def _convolve(x: jax.Array, kernel: jax.Array, padding: str) -> jax.Array:
    return lax.conv_general_dilated(x, kernel, (1, 1), padding, dimension_numbers=CONV_DIMENSIONS)


def _subsample(x: jax.Array) -> jax.Array:
    """LeNet-5's S layers: the mean of each 2x2 block (a window sum, scaled)."""
    window = (1, LENET_POOL, LENET_POOL, 1)
    return lax.reduce_window(x, 0.0, lax.add, window, window, "VALID") * (1.0 / LENET_POOL**2)


def lenet(params: dict, images: jax.Array) -> jax.Array:
    """LeNet-5 on [B, H, W, 1] images -> [B, classes] logits."""
    x = _subsample(_gelu(_convolve(images, params["w1"], "SAME") + params["b1"]))  # C1, S2
    x = _subsample(_gelu(_convolve(x, params["w2"], "VALID") + params["b2"]))  # C3, S4
    x = _gelu(x.reshape(x.shape[0], -1) @ params["w3"] + params["b3"])  # F5
    x = _gelu(x @ params["w4"] + params["b4"])  # F6
    return x @ params["w5"] + params["b5"]


def _gelu(x: jax.Array) -> jax.Array:
    """Exact GELU, x * Phi(x) through erf: smooth everywhere, unlike ReLU."""
    return jax.nn.gelu(x, approximate=False)


def save_initial_params(spec: ModelSpec, seed: int, path) -> None:
    """Write the seed's initial weights; every lane of this model and seed loads this one file."""
    from gradlanes.atomic import atomic_path

    params = init_params(spec, seed)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, **params)
