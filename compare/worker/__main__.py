"""``python -m compare.worker SPEC RESULT``."""
import sys

from compare.worker.decode import measure_cell
from compare.worker.steps import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], measure_cell))
