"""PolyTTS's entry point: `python server.py` (what `./run.sh` runs) checks the settings, then serves the app
(web/app.py) on POLYTTS_HOST and POLYTTS_PORT until a stop request has drained it.

The settings are checked before the app's modules are imported (about a second), so an invalid configuration is one
line and exit 2 at once. The port is bound by the server itself, so a port already in use is a non-zero exit with a
message that says so, not uvicorn's silent exit 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from settings import settings_or_report

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""One format for the service's lines and uvicorn's: uvicorn gets no logging config of its own."""


def main() -> int:
    # Settings come from the environment only; `--help` says so, and any argument is refused rather than ignored.
    argparse.ArgumentParser(
        description="PolyTTS: serve text-to-speech over HTTP.",
        epilog="Configured by POLYTTS_* environment variables (POLYTTS_HOST, POLYTTS_PORT, ...): docs/settings.md.",
    ).parse_args()
    # Model libraries draw tqdm progress bars on stderr (VoxCPM, for every generation): noise in a server's log.
    # tqdm reads this when it is first imported, which happens later, when an engine loads.
    os.environ.setdefault("TQDM_DISABLE", "1")
    settings = settings_or_report()
    if settings is None:
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format=LOG_FORMAT, stream=sys.stderr)
    from web.app import serve  # the app's modules, once the settings are known to be valid

    return serve(settings)


if __name__ == "__main__":
    sys.exit(main())
