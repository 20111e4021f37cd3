"""`python -m cism ...` is the `cism` command."""
import sys

from .cli import main

sys.exit(main())
