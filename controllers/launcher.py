"""The project's own launcher for the os-ken controller.

os-ken >= 4 ships no osken-manager, so this does its job: register os-ken's options,
listen on 127.0.0.1 only, load the Harmonics application with the native hub, and
stop cleanly (bounded) on SIGTERM/SIGINT.

  python -m controllers.launcher --config RUN/controller.json --port 6653
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

os.environ.setdefault("OSKEN_HUB_TYPE", "native")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="controller JSON config of the run")
    ap.add_argument("--port", type=int, default=6653, help="OpenFlow port on 127.0.0.1")
    ap.add_argument("--log", default=None, help="log file (default: stderr)")
    ap.add_argument("--app", default="controllers.app")
    args = ap.parse_args(argv)

    logging.basicConfig(level=logging.INFO, filename=args.log,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    os.environ["HARMONICS_CONTROLLER_CONFIG"] = os.path.abspath(args.config)

    from os_ken import cfg
    from os_ken.base.app_manager import AppManager  # (before controller: import cycle)
    import os_ken.controller.controller  # noqa: F401  registers the --ofp-* options

    cfg.CONF(args=["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", str(args.port),
                   "--ofp-ssl-listen-port", str(args.port + 1)],
             project="os_ken", version="harmonics")
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    mgr = AppManager.get_instance()
    mgr.load_apps([args.app])
    contexts = mgr.create_contexts()
    mgr.instantiate_apps(**contexts)
    logging.getLogger("harmonics.controller").info("listening on 127.0.0.1:%d", args.port)
    while not stop.wait(0.2):
        pass
    # os-ken's native hub cannot kill its threads: close the apps with a bound, then leave.
    closer = threading.Thread(target=mgr.close, daemon=True)
    closer.start()
    closer.join(timeout=2.0)
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
