"""`python -m ember.cli ...` is the `ember` console script."""
import sys

from .main import main

sys.exit(main())
