"""Why concurrent ncu fails in containers that share a GPU (issue 38): four containers profile at
once, each with its own network namespace (network none), then sharing one (the first's)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_container as gc  # noqa: E402

gc.setup()
from docker.types import Mount  # noqa: E402

from raiworker.gpu_access import detect  # noqa: E402
from raiworker.gpus import discover  # noqa: E402

client = gc.engine()
acc = detect("auto", [], client.info().get("Runtimes"), [g.index for g in discover("auto")])
opts = acc.container_options(["0"], client.images.get(gc.IMAGE).attrs["Config"]["Env"])
opts["mounts"] = opts.get("mounts", []) + [Mount("/src", str(gc.ROOT / "examples/ece408-conv"), type="bind", read_only=True)]
TMPFS = {"/build": "rw,exec,size=2048m,uid=1000", "/tmp": "rw,exec,size=1024m,mode=1777"}
CMD = "cp -r /src/* /build && make -s m2 >/dev/null && sleep 1 && ncu --section SpeedOfLight ./m2 100 2>&1 | grep -c ERROR; true"


def run(mode: str) -> list[str]:
    holder = client.containers.run(gc.IMAGE, ["sleep", "60"], detach=True, network_mode="none", user="1000:1000",
                                   ipc_mode="shareable", **opts)
    out: list[str] = []

    def one() -> None:
        net = "none" if mode == "private" else f"container:{holder.id}"
        ipc = {} if mode != "net+ipc" else {"ipc_mode": f"container:{holder.id}"}
        out.append(client.containers.run(gc.IMAGE, ["sh", "-c", CMD], remove=True, network_mode=net, user="1000:1000",
                                         working_dir="/build", tmpfs=TMPFS, **ipc, **opts).decode().strip())

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(50)
    holder.remove(force=True)
    return out


for mode in sys.argv[1:] or ("private", "net", "net+ipc"):
    gc.say(f"{mode}: ERROR lines per container {run(mode)}")
    with open(gc.OUT / "ncu-probe.txt", "a") as fh:
        fh.write(f"{mode}: {out_last}\n" if (out_last := "see log") else "")
