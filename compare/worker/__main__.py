"""``python -m compare.worker SPEC RESULT``."""
import sys

from compare.worker.steps import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
