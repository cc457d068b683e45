"""`gradlanes`: read the committed results from a terminal, and classify a digit you drew.

gradlanes table                          the committed summary as an aligned table
gradlanes digits <lane> [--seed S]       a lane's ASCII digits with verdicts
gradlanes predict <image> --lane L [--seed S]   the ten class probabilities for a drawing
gradlanes readme                         refresh README.md's results block from the summary
gradlanes diff [REV_A] [REV_B]           compare the results of two commits (or --folders A B)

Every command reads the config's experiment (results/<experiment>/); `--experiment NAME` another.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import yaml

from gradlanes.atomic import recover_folder
from gradlanes.environment import REPO
from gradlanes.layout import default_experiment, name_errors, published, work
from gradlanes.report.diff import add_diff_parser


class CliError(Exception):
    pass


def _project(root: str | None) -> Path:
    return Path(root) if root else (Path.cwd() if (Path.cwd() / "config.yaml").is_file() else REPO)


def _config(root: Path) -> dict:
    path = root / "config.yaml"
    if not path.is_file():
        raise CliError(f"{path} not found; run gradlanes from the project folder or pass --project")
    return yaml.safe_load(path.read_text())


def _published_root(args) -> tuple[Path, str]:
    """The project folder and the experiment a command reads (--experiment, else the config's)."""
    root = _project(args.project)
    experiment = args.experiment or default_experiment(_config(root))
    if problems := name_errors(experiment):
        raise CliError("; ".join(problems).replace("'experiment'", "--experiment"))
    folder = published(experiment).path(root)
    recover_folder(folder)  # a publish killed between its two renames (no renameat2) left it aside
    if not folder.is_dir():
        found = sorted(p.parent.name for p in (root / "results").glob("*/published.json"))
        raise CliError(
            f"no published experiment {experiment!r} ({folder} not found); published here: "
            f"{', '.join(found) or 'none'}. Run `snakemake --cores all` to publish it"
        )
    return root, experiment


def _lane_settings(config: dict, lane: str) -> dict:
    if lane not in config["lanes"]:
        raise CliError(f"no lane {lane!r} in config.yaml; lanes: {', '.join(config['lanes'])}")
    return config["lanes"][lane]


def table(args) -> str:
    import pandas as pd

    from gradlanes.report.tables import terminal_table

    root, experiment = _published_root(args)
    path = published(experiment).path(root) / "summary.parquet"
    if not path.is_file():
        raise CliError(f"{path} not found; run `snakemake --cores all` to publish experiment {experiment!r}")
    return terminal_table(pd.read_parquet(path))


def digits(args) -> str:
    root, experiment = _published_root(args)
    folder = published(experiment).path(root)
    lanes = sorted(p.name for p in (folder / "runs").iterdir()) if (folder / "runs").is_dir() else []
    if args.lane not in lanes:
        raise CliError(f"no lane {args.lane!r} in {folder}; lanes: {', '.join(lanes) or 'none'}")
    path = root / published(experiment).digits(args.lane, args.seed)
    if not path.is_file():
        raise CliError(f"{path} not found: experiment {experiment!r} has no seed {args.seed} of {args.lane}")
    return path.read_text().rstrip()


def predict(args) -> str:
    from gradlanes.data.description import MNIST
    from gradlanes.experiment.spec import resolve
    from gradlanes.program.capture import capture
    from gradlanes.program.interpreter import Interpreter
    from gradlanes.report.digits import ascii_digit
    from gradlanes.report.drawn import load_greyscale, mnist_style
    from gradlanes.run.modelfile import load_model

    root = _project(args.project)
    config = _config(root)
    settings = _lane_settings(config, args.lane)
    experiment = args.experiment or default_experiment(config)
    model_path = root / work(experiment).model(args.lane, args.seed)
    if not model_path.is_file():
        raise CliError(
            f"no trained weights for lane {args.lane!r} seed {args.seed} ({model_path}); "
            f"run `snakemake --cores all --until train_{args.lane}` first"
        )
    model = load_model(model_path)
    if model.status != "ok":
        raise CliError(f"lane {args.lane!r} seed {args.seed} did not train here (status {model.status})")
    params = model.params
    pixels = mnist_style(load_greyscale(args.image))
    # The forward program for one image: same model, loss and weights, batch of one.
    single = {k: v for k, v in settings.items() if k != "epochs"} | {"batch_size": 1, "steps": 1}
    classes = int(config["dataset"].get("classes", 10))
    # One drawn 28x28 image: MNIST's shape, the config's classes (the counts only bound the sizes).
    drawn = dataclasses.replace(MNIST, name=config["dataset"]["name"], classes=classes)
    exp = resolve(args.lane, single, args.seed, drawn)
    program = capture(exp, eval_batch=1)
    images = (pixels.reshape(1, -1) / np.float32(255)).astype(np.float32)
    (logits,) = Interpreter(program.forward, "forward program")(*program.flatten_params(params), images)
    logits = logits[0].astype(np.float64)
    if exp.loss == "xent":
        scores = np.exp(logits - logits.max())
        title = "probabilities (softmax of the logits)"
    else:  # an MSE-trained model regresses one-hot targets; its outputs are not logits
        scores = np.clip(logits, 0, None) + 1e-12
        title = "scores (outputs regressing one-hot targets, clipped at 0 and normalised)"
    scores /= scores.sum()
    lines = [
        f"{args.image} as the lane sees it (28x28, MNIST-centred):",
        *ascii_digit(pixels),
        "",
        f"lane {args.lane}, seed {args.seed}: {title}",
    ]
    best = int(np.argmax(scores))
    lines += [
        f"  {digit}: {score:7.4f} {'#' * int(round(40 * score))}{'   <- predicted' if digit == best else ''}"
        for digit, score in enumerate(scores)
    ]
    return "\n".join(lines)


README_START = "<!-- results:start (gradlanes readme writes this block from the experiment's summary.md) -->"
README_END = "<!-- results:end -->"


def readme_block(root: Path, experiment: str) -> str:
    layout = published(experiment)
    summary = root / layout.summary("md")
    if not summary.is_file():
        raise CliError(f"{summary} not found; run `snakemake --cores all` first")
    body = summary.read_text().split("\n", 1)[1].strip().replace("\n## ", "\n### ")
    # The summary links files relative to its own folder; the README sits two levels up.
    body = body.replace("](figures/", f"]({layout.root}/figures/").replace(
        "](runs/", f"]({layout.root}/runs/"
    )
    figure = f"![Cost and accuracy per lane]({layout.figure('cost_accuracy')})"
    source = f"*Experiment `{experiment}`, from [{layout.summary('md')}]({layout.summary('md')}).*"
    return f"{README_START}\n{source}\n\n{body}\n\n{figure}\n{README_END}"


def readme(args) -> str:
    """Refresh the results block of README.md from the committed summary."""
    root, experiment = _published_root(args)
    path = root / "README.md"
    text = path.read_text()
    if README_START not in text or README_END not in text:
        raise CliError(f"{path} has no results block ({README_START} ... {README_END})")
    head, rest = text.split(README_START, 1)
    tail = rest.split(README_END, 1)[1]
    from gradlanes.atomic import write_text

    write_text(path, head + readme_block(root, experiment) + tail)
    return f"refreshed the results block of {path}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gradlanes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", help="the gradlanes folder (default: here if it holds config.yaml)")
    commands = parser.add_subparsers(dest="command", required=True)
    shown = commands.add_parser("table", help="print the committed summary table")
    shown.set_defaults(run=table)
    show = commands.add_parser("digits", help="print a lane's ASCII digits with verdicts")
    show.add_argument("lane")
    show.add_argument("--seed", type=int, default=0)
    show.set_defaults(run=digits)
    guess = commands.add_parser("predict", help="classify a digit image with a lane's trained weights")
    guess.add_argument("image")
    guess.add_argument("--lane", required=True)
    guess.add_argument("--seed", type=int, default=0)
    guess.set_defaults(run=predict)
    refresh = commands.add_parser("readme", help="refresh README.md's results block from the summary")
    refresh.set_defaults(run=readme)
    for command in (shown, show, guess, refresh):
        command.add_argument("--experiment", help="results/<NAME>/ (default: the config's experiment)")
    add_diff_parser(commands)
    args = parser.parse_args(argv)
    try:
        print(args.run(args))
    except CliError as error:
        print(f"gradlanes: {error}", file=sys.stderr)
        return 2
    except ValueError as error:  # ImageUnreadable and config errors carry their own explanation
        print(f"gradlanes: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
