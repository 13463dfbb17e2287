"""GGUFFile opens only regular files: a FIFO, a character device or a directory is a clear GGUFError at once
(no blocking open, no endless read), and the CLI prints it without a traceback."""
import os
import threading

import pytest

from fastgguf import GGUFError, GGUFFile
from fastgguf.cli import main


def _open_with_watchdog(path, seconds=10):
    """GGUFFile(path) in a thread: (finished, exception). A blocked open leaves the thread behind."""
    box = {}

    def target():
        try:
            GGUFFile(path).close()
            box["exc"] = None
        except BaseException as e:  # noqa: BLE001
            box["exc"] = e
    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    return "exc" in box, box.get("exc")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_is_rejected_without_blocking(tmp_path):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    try:
        done, exc = _open_with_watchdog(fifo)
        assert done, "GGUFFile blocked on a FIFO"
        assert isinstance(exc, GGUFError) and "not a regular file" in str(exc)
    finally:
        if not done:  # unblock the stuck open so the thread can end
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_character_device_is_rejected():
    done, exc = _open_with_watchdog("/dev/zero")
    assert done, "GGUFFile kept reading /dev/zero"
    assert isinstance(exc, GGUFError) and "not a regular file" in str(exc)


def test_directory_is_rejected(tmp_path):
    with pytest.raises(GGUFError, match="is a directory"):
        GGUFFile(tmp_path)


def test_missing_file_is_still_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        GGUFFile(tmp_path / "missing.gguf")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_cli_info_on_device_and_directory_prints_an_error(tmp_path, capsys):
    for path in ("/dev/zero", str(tmp_path)):
        assert main(["info", path]) == 1
        err = capsys.readouterr().err
        assert "error:" in err and "Traceback" not in err
