"""`python -m server`: the cloud service, same flags as `umbra cloud serve`."""

import logging
import sys

from server.serve import main
from umbra.errors import UmbraError

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        sys.exit(main())
    except UmbraError as exc:
        print(f"umbra cloud: error: {exc}", file=sys.stderr)
        sys.exit(2)
