"""The model tool's command line called in process, for the hostile suites: its exit code and
output, and the one shape every refusal must have."""

from __future__ import annotations


def cli(argv, capsys) -> tuple[int, str, str]:
    """``python -m qcore.model ARGV`` in this process: (exit code, stdout, stderr)."""
    from qcore.model.__main__ import main

    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own refusals
        rc = exc.code
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def refused(argv, capsys, word: str) -> str:
    """The command refuses with exit 2 and one error line holding ``word`` (no traceback, no
    figure printed, no 'unexpected' catch-all)."""
    rc, out, err = cli(argv, capsys)
    lines = err.strip().splitlines()
    assert rc == 2, (rc, out, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "unexpected" not in lines[0] and "Traceback" not in err, err
    assert word.lower() in lines[0].lower(), (word, lines[0])
    assert "plan at" not in out and "sensitivity:" not in out, out
    return lines[0]
