"""``python -m clovercode`` and the ``clovercode`` command.

SIGTERM (how CI cancels a job) and SIGHUP are caught from the first instruction: loading the CLI
takes a second or more, and a job cancelled then still gets its one JSON object and exit code 143.
"""

from clovercode.termination import raise_from_start


def main() -> None:
    raise_from_start()
    try:
        from clovercode.cli import main as run
    except KeyboardInterrupt as exc:  # a signal (or Ctrl-C) while the CLI loads
        from clovercode.jsonexit import exit_interrupted_early

        exit_interrupted_early(exc)
    run()


if __name__ == "__main__":
    main()
