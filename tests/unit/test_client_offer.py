"""GET /client/ from a server that runs from a source tree (PYTHONPATH, the distributions not
installed), as on the GPU host: it offers what it can make and names what it cannot, instead of
failing the whole page (it reset the connection there)."""

from __future__ import annotations

import io
import zipfile

from raiserver.api.clientdist import PYZ, PYZ_PACKAGES, offer


def test_a_missing_distribution_leaves_the_rest_offered_and_is_named():
    made = offer(dists=("raiclient", "rai-no-such-dist"), pyz_packages=PYZ_PACKAGES)
    assert PYZ in made.files and any(name.startswith("raiclient-") for name in made.files)
    assert made.missing == ("the rai-no-such-dist wheel: the distribution rai-no-such-dist is not installed beside the server",)
    with zipfile.ZipFile(io.BytesIO(made.files[PYZ].data)) as pyz:
        assert "raiclient/entry.py" in pyz.namelist()


def test_a_missing_package_drops_only_the_one_file_client():
    made = offer(dists=("raiprotocol",), pyz_packages=(*PYZ_PACKAGES, "rai_no_such_package"))
    assert PYZ not in made.files and any(name.startswith("raiprotocol-") for name in made.files)
    assert made.missing == (f"{PYZ}: the package rai_no_such_package is not installed beside the server",)
