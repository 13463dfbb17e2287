"""``python -m fastgguf ...``: the command line (fastgguf.cli.main)."""
import sys

from fastgguf.cli import main

sys.exit(main())
