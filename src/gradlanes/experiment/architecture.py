"""What each model is, as parameter shapes: no JAX, so that planning a DAG can size a lane's model.

The models' computations (`gradlanes.experiment.models`) are JAX; their shapes and names are
plain data, which the config checks and the experiment's description read before any job runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from gradlanes.experiment.naming import model_key

MODELS = ("mlp", "softmax", "cnn")

#: LeNet-5's layers: C1 and C3 convolutions (5x5; C1 padded to keep the image size, as the paper's
#: 32x32 input around a 28x28 digit), S2 and S4 2x2 average-pool subsampling, F5, F6, output.
LENET_KERNEL, LENET_POOL, LENET_MAPS, LENET_DENSE = 5, 2, (6, 16), (120, 84)


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
