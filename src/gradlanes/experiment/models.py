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
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from gradlanes.experiment.naming import model_key

INITIALIZERS = {
    "lecun_normal": jax.nn.initializers.lecun_normal,
    "he_normal": jax.nn.initializers.he_normal,
    "glorot_normal": jax.nn.initializers.glorot_normal,
    "zeros": lambda: jax.nn.initializers.zeros,
}


MODELS = ("mlp", "softmax", "cnn")

#: LeNet-5's layers: C1 and C3 convolutions (5x5; C1 padded to keep the image size, as the paper's
#: 32x32 input around a 28x28 digit), S2 and S4 2x2 average-pool subsampling, F5, F6, output.
LENET_KERNEL, LENET_POOL, LENET_MAPS, LENET_DENSE = 5, 2, (6, 16), (120, 84)
#: Images are [B, H, W, channels] and kernels [kh, kw, in, out]: the layout XLA's CPU convolves fastest.
CONV_DIMENSIONS = ("NHWC", "HWIO", "NHWC")


@dataclass(frozen=True)
class ModelSpec:
    name: str  # one of MODELS
    inputs: int
    classes: int
    hidden: int = 128
    init: str = "lecun_normal"
    image_shape: tuple[int, ...] = ()  # (H, W): what `cnn` convolves; the dense models read only `inputs`

    @classmethod
    def for_dataset(cls, name: str, dataset, hidden: int = 128, init: str = "lecun_normal") -> ModelSpec:
        """The model `name` sized for a dataset's images and classes (a `DatasetDescription`)."""
        image_shape = tuple(dataset.image_shape) if name == "cnn" else ()
        return cls(name, dataset.inputs, dataset.classes, hidden, init, image_shape)

    @property
    def key(self) -> str:
        return model_key(self.name, self.hidden, self.init)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        if self.name == "mlp":
            return {
                "w1": (self.inputs, self.hidden),
                "b1": (self.hidden,),
                "w2": (self.hidden, self.classes),
                "b2": (self.classes,),
            }
        if self.name == "softmax":
            return {"w": (self.inputs, self.classes), "b": (self.classes,)}
        if self.name == "cnn":
            return self._lenet_shapes()
        raise ValueError(f"unknown model {self.name!r}; gradlanes knows {', '.join(map(repr, MODELS))}")

    def _lenet_shapes(self) -> dict[str, tuple[int, ...]]:
        if len(self.image_shape) != 2:
            raise ValueError(
                f"model 'cnn' convolves 2-D images; this dataset's images are {self.image_shape}"
            )
        # C1 keeps H x W; S2 halves it; C3 (unpadded) takes 4; S4 halves again.
        sides = [(side // LENET_POOL - (LENET_KERNEL - 1)) // LENET_POOL for side in self.image_shape]
        if min(sides) < 1:
            raise ValueError(
                f"model 'cnn' (LeNet-5) needs images of at least 12x12 pixels; these are "
                f"{'x'.join(map(str, self.image_shape))}"
            )
        c1, c3 = LENET_MAPS
        f5, f6 = LENET_DENSE
        return {
            "w1": (LENET_KERNEL, LENET_KERNEL, 1, c1),
            "b1": (c1,),
            "w2": (LENET_KERNEL, LENET_KERNEL, c1, c3),
            "b2": (c3,),
            "w3": (sides[0] * sides[1] * c3, f5),
            "b3": (f5,),
            "w4": (f5, f6),
            "b4": (f6,),
            "w5": (f6, self.classes),
            "b5": (self.classes,),
        }


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
