"""``python -m clovercode`` and the ``clovercode`` command.

SIGINT, SIGTERM (how CI cancels a job) and SIGHUP are caught from the first line here: loading the
CLI takes a second or more, and a job cancelled then still gets its one JSON object and 130 / 143 /
129. The only window left is the interpreter's own start-up, before this file runs (docs/usage.md).
"""

import signal

_early: list = []  # a signal that came while termination.py itself loads: it acts as soon as it can


def _note(signum, frame):  # noqa: ANN001 - the first handler: standard library only, records
    _early.append(signum)


for _signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(_signum, _note)


def main() -> None:
    import os
    import sys

    if sys.argv[1:] == ["--version"]:  # answered before the CLI loads (typer and rich take most of a start)
        from clovercode import __version__

        print(f"clovercode {__version__}")
        return
    from clovercode.ground.termination import ENDING, absorb_all, interrupt_for, raise_from_start

    raise_from_start()
    code = 1
    try:
        try:
            if _early and ENDING.take(_early[0]):
                raise interrupt_for(_early[0])
            if sys.argv[1:2] == ["acp"]:  # the editor's initialize is answered while the CLI and the SDK load
                from clovercode.front.acp.early import start

                start(sys.argv[2:])
            from clovercode.front.cli import main as run
        except KeyboardInterrupt as exc:  # a signal (or Ctrl-C) while the CLI loads
            from clovercode.front.jsonexit import exit_interrupted_early

            exit_interrupted_early(exc)
        except Exception as exc:  # the same, wrapped by Python: a signal inside a class's __set_name__
            # (rich defines one while it loads) comes out as a RuntimeError; anything else is a crash
            from clovercode.front.jsonexit import exit_interrupted_early
            from clovercode.ground.termination import interrupt_behind

            interrupt = interrupt_behind(exc)
            if interrupt is None:
                raise
            exit_interrupted_early(interrupt)
        run()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt as exc:  # the first signal, outside every handler of the command
        from clovercode.front.jsonexit import exit_interrupted_early

        try:
            exit_interrupted_early(exc)
        except SystemExit as done:
            code = int(done.code or 0)
    finally:
        absorb_all()  # a second signal from here on changes nothing
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: the exit code still says how the run ended
        pass
    if ENDING.signum is not None:
        # CPython remembers a Ctrl-C that landed in code built by exec() and would end by SIGINT
        # instead; everything is written and flushed by now
        os._exit(ENDING.exit_code(code))
    sys.exit(ENDING.exit_code(code))


if __name__ == "__main__":
    main()
