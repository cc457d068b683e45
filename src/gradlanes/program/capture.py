"""Trace the training program once: forward, gradient, optimizer init and the whole train step.

The captured jaxprs take every varying thing as an input (weights, optimizer state, images,
labels), so one program serves every step and every mini-batch on every engine. `CapturedProgram`
also records each program's size (top-level and recursive equation counts) and its primitives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gradlanes.experiment.batching import eval_batch as default_eval_batch
from gradlanes.experiment.losses import loss_fn
from gradlanes.experiment.models import forward
from gradlanes.experiment.optimizers import make_optimizer
from gradlanes.experiment.spec import Experiment
from gradlanes.program.jaxcompat import ClosedJaxpr, Jaxpr, sub_jaxprs, without_source_locations

#: A lane's `matmul_precision` as JAX names it. Captured into every dot_general of the program, so
#: XLA on a GPU computes float32 products in float32 (not TF32) unless the lane asks for tf32.
JAX_PRECISION = {"highest": "highest", "tf32": "tensorfloat32"}


def count_equations(jaxpr: Jaxpr) -> int:
    """Equations of `jaxpr` plus those of every nested jaxpr, recursively."""
    return sum(1 + sum(count_equations(sub) for sub in sub_jaxprs(eqn)) for eqn in jaxpr.eqns)


def primitives_of(jaxpr: Jaxpr) -> set[str]:
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for sub in sub_jaxprs(eqn):
            names |= primitives_of(sub)
    return names


@dataclass
class CapturedProgram:
    """The traced programs of one experiment and the pytree layouts of their flat inputs."""

    forward: ClosedJaxpr  # (*param leaves, images[E, D]) -> logits[E, C]
    gradient: ClosedJaxpr  # (*param leaves, images[B, D], labels[B]) -> (loss, *grad leaves)
    init_state: ClosedJaxpr  # (*param leaves) -> *optimizer-state leaves
    step: ClosedJaxpr  # (*params, *state, images[B, D], labels[B]) -> (*params, *state, loss)
    # K steps in one program (lax.scan of the step), or None when fuse_steps is 1:
    # streamed: (*params, *state, images[K, B, D], labels[K, B]) -> (*params, *state, losses[K]);
    # full batch: (*params, *state, images[B, D], labels[B]) -> the same, one batch for all K.
    fused: ClosedJaxpr | None
    params_tree: Any
    state_tree: Any
    eval_batch: int
    ir: dict[str, dict[str, int]] = field(default_factory=dict)
    primitives: list[str] = field(default_factory=list)
    artifact: Any = None  # its ProgramArtifact (files and fingerprint), once a lane has built it

    @property
    def n_params(self) -> int:
        return self.params_tree.num_leaves

    @property
    def n_state(self) -> int:
        return self.state_tree.num_leaves

    def flatten_params(self, params: dict) -> list[np.ndarray]:
        return jax.tree_util.tree_leaves(params)

    def unflatten_params(self, leaves) -> dict:
        return jax.tree_util.tree_unflatten(self.params_tree, list(leaves))


def _programs(exp: Experiment):
    optimizer = make_optimizer(exp.optimizer, exp.learning_rate, exp.schedule, exp.steps)

    def logits_of(params, images):
        return forward(exp.model, params, images)

    def loss_of(params, images, labels):
        return loss_fn(exp.loss, logits_of(params, images), labels)

    def gradient(params, images, labels):
        loss, grads = jax.value_and_grad(loss_of)(params, images, labels)
        return loss, grads

    def train_step(params, opt_state, images, labels):
        loss, grads = jax.value_and_grad(loss_of)(params, images, labels)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return jax.tree_util.tree_map(jnp.add, params, updates), opt_state, loss

    def fused_steps(params, opt_state, images, labels):
        def body(carry, batch):
            params, opt_state = carry
            params, opt_state, loss = train_step(params, opt_state, *(batch or (images, labels)))
            return (params, opt_state), loss

        streamed = None if exp.full_batch else (images, labels)
        (params, opt_state), losses = jax.lax.scan(body, (params, opt_state), streamed, length=exp.fuse_steps)
        return params, opt_state, losses

    return logits_of, gradient, optimizer.init, train_step, fused_steps


def capture(exp: Experiment, eval_batch: int | None = None) -> CapturedProgram:
    """Trace the experiment's programs with `jax.make_jaxpr`; nothing is compiled.

    Traced at the lane's matmul precision, so the precision is part of the program every engine
    receives (the NumPy engines compute float32 products exactly as `highest` asks).
    """
    with jax.default_matmul_precision(JAX_PRECISION[exp.matmul_precision]), without_source_locations():
        return _capture(exp, eval_batch)


def _capture(exp: Experiment, eval_batch: int | None) -> CapturedProgram:
    eval_batch = eval_batch or default_eval_batch(exp.test_images)
    logits_of, gradient, init_state, train_step, fused_steps = _programs(exp)
    params = {name: jax.ShapeDtypeStruct(shape, jnp.float32) for name, shape in exp.model.shapes().items()}
    images = jax.ShapeDtypeStruct((exp.batch_size, exp.model.inputs), jnp.float32)
    labels = jax.ShapeDtypeStruct((exp.batch_size,), jnp.int32)
    eval_images = jax.ShapeDtypeStruct((eval_batch, exp.model.inputs), jnp.float32)

    state_shape = jax.eval_shape(init_state, params)
    programs = {
        "forward": jax.make_jaxpr(logits_of)(params, eval_images),
        "gradient": jax.make_jaxpr(gradient)(params, images, labels),
        "init_state": jax.make_jaxpr(init_state)(params),
        "step": jax.make_jaxpr(train_step)(params, state_shape, images, labels),
        "fused": None,
    }
    if exp.fuse_steps > 1:
        block = (exp.fuse_steps,) if not exp.full_batch else ()
        programs["fused"] = jax.make_jaxpr(fused_steps)(
            params,
            state_shape,
            jax.ShapeDtypeStruct(block + images.shape, images.dtype),
            jax.ShapeDtypeStruct(block + labels.shape, labels.dtype),
        )
    for name, program in programs.items():
        if program is None:
            continue
        baked = [np.shape(c) for c in program.consts if np.size(c) > 1]
        if baked:  # an array constant would mean data leaked into the program
            raise AssertionError(f"captured {name} program baked in array constants {baked}")
    program = CapturedProgram(
        params_tree=jax.tree_util.tree_structure(params),
        state_tree=jax.tree_util.tree_structure(state_shape),
        eval_batch=eval_batch,
        **programs,
    )
    for name in ("forward", "gradient", "step", "fused"):
        if getattr(program, name) is None:
            continue
        jaxpr = getattr(program, name).jaxpr
        program.ir[name] = {"top": len(jaxpr.eqns), "total": count_equations(jaxpr)}
    program.primitives = sorted(
        set().union(*(primitives_of(p.jaxpr) for p in programs.values() if p is not None))
    )
    return program
