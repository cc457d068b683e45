"""The models gradlanes trains, written once in jax.numpy and traced, never re-implemented per lane.

`mlp` is 784 -> hidden -> classes with ReLU (Tlaloc's network); `softmax` is a single affine layer
(TypeShade's softmax regression). Parameters are dicts of float32 arrays; initial weights come from
a threefry key of the seed, so every lane that shares a model and seed starts bit-identically.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from gradlanes.experiment.naming import model_key

INITIALIZERS = {
    "lecun_normal": jax.nn.initializers.lecun_normal,
    "he_normal": jax.nn.initializers.he_normal,
    "glorot_normal": jax.nn.initializers.glorot_normal,
    "zeros": lambda: jax.nn.initializers.zeros,
}


@dataclass(frozen=True)
class ModelSpec:
    name: str  # "mlp" or "softmax"
    inputs: int
    classes: int
    hidden: int = 128
    init: str = "lecun_normal"

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
        raise ValueError(f"unknown model {self.name!r}; gradlanes knows 'mlp' and 'softmax'")


def init_params(spec: ModelSpec, seed: int) -> dict[str, np.ndarray]:
    """Initial weights from threefry2x32(seed); biases start at zero."""
    if spec.init not in INITIALIZERS:
        raise ValueError(f"unknown init {spec.init!r}; choose one of {', '.join(INITIALIZERS)}")
    shapes = spec.shapes()
    weights = sorted(name for name in shapes if name.startswith("w"))
    keys = jax.random.split(jax.random.key(seed, impl="threefry2x32"), len(weights))
    initializer = INITIALIZERS[spec.init]()
    params = {}
    for name, shape in shapes.items():
        if name in weights:
            value = initializer(keys[weights.index(name)], shape, jnp.float32)
        else:
            value = jnp.zeros(shape, jnp.float32)
        params[name] = np.asarray(value, dtype=np.float32)
    return params


def forward(spec: ModelSpec, params: dict, images: jax.Array) -> jax.Array:
    """Logits for a batch of flattened images: (B, inputs) -> (B, classes)."""
    if spec.name == "mlp":
        hidden = jax.nn.relu(images @ params["w1"] + params["b1"])
        return hidden @ params["w2"] + params["b2"]
    return images @ params["w"] + params["b"]


def save_initial_params(spec: ModelSpec, seed: int, path) -> None:
    """Write the seed's initial weights; every lane of this model and seed loads this one file."""
    from gradlanes.atomic import atomic_path

    params = init_params(spec, seed)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, **params)
