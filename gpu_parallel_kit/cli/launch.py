"""What `gpk` starts before its own imports: the server of each backend its command will run on.

The command line's modules (the API, pandas, the tables) take 0.7 s to import on two cores, and
the first run waits for its server: 2.7 s for JAX's to import and list the devices, 4.8 s for
TensorFlow's. So the backends are read from the arguments alone, before the parser and the API
are imported, and their servers start first. A command that then fails to parse leaves a server
started for nothing; it ends with the command (`runs/scheduling/servers_ahead.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..runs.description.device_choice import installed

RUN_COMMANDS = ("run", "compare")
# The first installed of these runs the demo. JAX first: on a 2-core CPU its server imports and
# lists the devices in 2.6-2.8 s against TensorFlow's 4.8-4.9 s, and the projection's count runs
# on that same server; the demo took 6.7-12.0 s on JAX against 10.7-16.7 s on TensorFlow.
DEMO_BACKENDS = ("jax", "tensorflow")


def demo_backend(asked: str | None = None) -> str:
    """The backend asked for, else the first of `DEMO_BACKENDS` that is installed."""
    if asked:
        return asked
    return next((name for name in DEMO_BACKENDS if installed(name)), "tensorflow")


def backends_for(argv: Sequence[str]) -> list[str | None]:
    """The backends the command in `argv` will run on (None: the default one); none for a
    command that runs nothing, or that only asks for help."""
    if "-h" in argv or "--help" in argv:
        return []
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    asked = _values_of("--backend", argv)
    if command == "demo":
        return [demo_backend(asked[0] if asked else None)]
    if command in RUN_COMMANDS:
        return list(asked) or [None]
    return []


def start_servers(argv: Sequence[str]) -> None:
    """Start the servers of `backends_for(argv)` in the background."""
    warm_each(backends_for(argv))


def warm_each(backends: Sequence[str | None]) -> None:
    """Start each backend's server in the background (None: the default backend's), once per
    process; a name that is no backend is left for the parser to refuse."""
    from ..runs.scheduling.servers_ahead import warm
    from ..strategies import BACKENDS

    for backend in backends:
        if backend is None or backend in BACKENDS:
            warm(backend)


def _values_of(option: str, argv: Sequence[str]) -> list[str]:
    """The values given to `option` (`--option a b` or `--option=a`), as argparse reads them."""
    values: list[str] = []
    for index, arg in enumerate(argv):
        if arg.startswith(option + "="):
            values.append(arg.partition("=")[2])
        elif arg == option:
            following = argv[index + 1 :]
            values.extend(following[: _first_option(following)])
    return values


def _first_option(args: Sequence[str]) -> int:
    return next((i for i, arg in enumerate(args) if arg.startswith("-")), len(args))
