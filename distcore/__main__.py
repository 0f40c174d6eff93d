import sys

from .cli import main

sys.exit(main(leave_at_once=True))
