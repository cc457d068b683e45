"""One lane's experiment made concrete: the validated config settings resolved against the dataset.

The config says `batch_size: full`, `train_images: all`, `epochs: 5`; training needs numbers.
`Experiment` holds the resolved numbers and is the single source every engine and record reads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from gradlanes.data.description import DatasetDescription
from gradlanes.experiment.architecture import ModelSpec
from gradlanes.experiment.naming import program_id


@dataclass(frozen=True)
class Experiment:
    lane: str
    engine: str
    device: str
    model: ModelSpec
    loss: str
    optimizer: str
    learning_rate: float
    schedule: str
    seed: int
    batch_size: int
    full_batch: bool
    train_images: int
    test_images: int
    steps: int
    steps_per_epoch: int
    eval_every: int
    log_rows: int
    fuse_steps: int = 1
    matmul_precision: str = "highest"  # the captured program's dot precision: highest or tf32
    program_id: str = ""  # the folder of its captured program under <experiment>/programs/

    @property
    def epochs(self) -> float:
        return self.steps / self.steps_per_epoch

    def config_record(self) -> dict[str, Any]:
        """The `config` block of a result record."""
        return {
            "model": self.model.name,
            "hidden": self.model.hidden if self.model.name == "mlp" else None,
            "init": self.model.init,
            "loss": self.loss,
            "optimizer": self.optimizer,
            "learning_rate": self.learning_rate,
            "schedule": self.schedule,
            "seed": self.seed,
            "batch_size": "full" if self.full_batch else self.batch_size,
            "batch_images": self.batch_size,
            "steps": self.steps,
            "epochs": round(self.epochs, 6),
            "steps_per_epoch": self.steps_per_epoch,
            "train_images": self.train_images,
            "test_images": self.test_images,
            "eval_every": self.eval_every,
            "fuse_steps": self.fuse_steps,
            "matmul_precision": self.matmul_precision,
        }

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve(lane: str, settings: dict, seed: int, dataset: DatasetDescription) -> Experiment:
    """Turn validated lane settings into concrete sizes, with errors naming the lane and key."""

    def count(key: str, available: int) -> int:
        value = settings.get(key, "all")
        if value == "all":
            return available
        if value > available:
            raise ValueError(f"'lanes.{lane}.{key}' is {value}, but the dataset has only {available} images")
        return int(value)

    train_images = count("train_images", dataset.train_count)
    test_images = count("test_images", dataset.test_count)
    full_batch = settings["batch_size"] == "full"
    batch_size = train_images if full_batch else int(settings["batch_size"])
    if batch_size > train_images:
        raise ValueError(
            f"'lanes.{lane}.batch_size' is {batch_size}, larger than its {train_images} training images"
        )
    steps_per_epoch = train_images // batch_size  # the last partial batch is dropped: one shape
    steps = int(settings["steps"]) if "steps" in settings else int(settings["epochs"]) * steps_per_epoch
    fuse_steps = int(settings.get("fuse_steps", 1))
    if steps % fuse_steps:
        raise ValueError(
            f"lane {lane!r} runs {steps} steps, not a multiple of fuse_steps {fuse_steps}; "
            "one compiled program must cover every dispatch"
        )
    model = ModelSpec.for_dataset(
        settings["model"],
        dataset,
        hidden=int(settings.get("hidden", 128)),
        init=settings.get("init", "lecun_normal"),
    )
    return Experiment(
        lane=lane,
        engine=settings["engine"],
        device=settings.get("device", "cpu"),
        model=model,
        loss=settings["loss"],
        optimizer=settings["optimizer"],
        learning_rate=float(settings["learning_rate"]),
        schedule=settings.get("schedule", "constant"),
        seed=int(seed),
        batch_size=batch_size,
        full_batch=full_batch,
        train_images=train_images,
        test_images=test_images,
        steps=steps,
        steps_per_epoch=steps_per_epoch,
        eval_every=steps_per_epoch if not full_batch else int(settings.get("eval_every", 50)),
        log_rows=int(settings.get("log_rows", 12)),
        fuse_steps=fuse_steps,
        matmul_precision=settings.get("matmul_precision", "highest"),
        program_id=program_id(dataset.name, settings),
    )
