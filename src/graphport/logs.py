"""graphport's loggers, and the GRAPHPORT_LOGS switch that shows them.

Each stage logs to a standard `logging` logger of its own, so applications route them as
they route any library's:

    graphport.export               time per stage of an export
    graphport.capture              what capture recorded
    graphport.shapes               specializations, small-size proofs and why
    graphport.shapes.guards        every shape guard added, with the user's line
    graphport.passes               decompositions chosen by run_decompositions, and their time
    graphport.check                the soundness checker's draws

Nothing is shown unless asked, like torch's TORCH_LOGS. `GRAPHPORT_LOGS` is a comma-separated
list of those names without the `graphport.` prefix (`guards` is short for `shapes.guards`),
each shown at INFO; `+name` shows it at DEBUG too (more detail), `-name` silences it below
ERROR; `all` stands for every logger:

    GRAPHPORT_LOGS=+shapes,guards python train.py      # shapes at DEBUG, guards at INFO
    GRAPHPORT_LOGS=export,passes graphport export ...  # time per stage, decompositions

The switch (or `graphport.configure_logging(spec)`) adds one stderr handler to the
`graphport` logger, sets the named loggers' levels and stops graphport's records from also
reaching the root logger's handlers; the root logger itself is never touched. Without it,
graphport only adds the NullHandler the logging HOWTO asks libraries for. Log calls use
lazy `%` arguments, and costly messages are built under `isEnabledFor`, so a disabled
logger costs one level check.
"""
from __future__ import annotations

import logging
import os
import sys

ROOT = "graphport"
LOGGERS = {
    "export": "graphport.export",
    "capture": "graphport.capture",
    "shapes": "graphport.shapes",
    "guards": "graphport.shapes.guards",
    "passes": "graphport.passes",
    "check": "graphport.check",
    "serde": "graphport.serde",
}
ENV = "GRAPHPORT_LOGS"
_handler: logging.Handler | None = None

logging.getLogger(ROOT).addHandler(logging.NullHandler())


def get_logger(name: str) -> logging.Logger:
    """The logger of a stage, by its short name (`shapes`, `guards`, ...)."""
    return logging.getLogger(LOGGERS[name])


def parse(spec: str) -> dict[str, int]:
    """`+shapes,guards,-capture` as {logger name: level}. Unknown names are an error that
    lists the known ones, so a typo does not silently show nothing."""
    levels: dict[str, int] = {}
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        level, name = logging.INFO, item
        if item[0] in "+-":
            level = logging.DEBUG if item[0] == "+" else logging.ERROR
            name = item[1:]
        names = list(LOGGERS) if name == "all" else [name]
        for short in names:
            full = LOGGERS.get(short) or (short if short in LOGGERS.values() else None)
            if full is None:
                from .errors import UnsupportedInputError
                raise UnsupportedInputError(
                    f"{ENV} names {name!r}, which is not one of graphport's loggers", find_location=False,
                    fix=f"use some of: {', '.join(LOGGERS)}, or all (prefix + for DEBUG, - to silence)")
            levels[full] = level
    return levels


def configure_logging(spec: str | None, stream=None) -> None:
    """Show graphport's loggers named in `spec` (GRAPHPORT_LOGS syntax) on `stream`
    (stderr). `None` or "" undoes it: levels back to unset, the handler removed."""
    global _handler
    root = logging.getLogger(ROOT)
    for full in LOGGERS.values():
        logging.getLogger(full).setLevel(logging.NOTSET)
    if _handler is not None:
        root.removeHandler(_handler)
        _handler = None
        root.propagate = True
    if not spec:
        return
    levels = parse(spec)
    for full, level in levels.items():
        logging.getLogger(full).setLevel(level)
    _handler = logging.StreamHandler(stream or sys.stderr)
    _handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    root.addHandler(_handler)
    root.propagate = False   # shown once, here, whatever the application did with the root logger


def configure_from_env() -> None:
    """Apply GRAPHPORT_LOGS when it is set (once, at `import graphport`); a wrong value is
    a warning there, not a failed import."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    try:
        configure_logging(spec)
    except ValueError as e:
        import warnings
        warnings.warn(str(e), stacklevel=3)
