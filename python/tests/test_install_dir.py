# SPDX-License-Identifier: MIT
"""docs/python.md, "Building and importing": `meson install` puts the
module where Debian's /usr/bin/python3 imports it from. Meson's own
choice under the default prefix, /usr/local/lib/python3/dist-packages,
is not on that interpreter's path (it searches
/usr/local/lib/python3.X/dist-packages), so an installed binary did not
import; python/meson.build now asks the interpreter."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig


def introspect(meson, build, what):
    out = subprocess.run([meson, "introspect", build, what],
                         capture_output=True, check=True, text=True)
    return json.loads(out.stdout)


def test_meson_install_puts_the_module_on_the_interpreters_path():
    # set by meson test (python/meson.build), as meson is on PATH there
    build = os.environ["TD_BUILD_ROOT"]
    meson = shutil.which("meson")
    assert meson, "meson is not on PATH"
    prefix = next(o["value"] for o in introspect(meson, build,
                                                 "--buildoptions")
                  if o["name"] == "prefix")
    dests = [dest for src, dest in introspect(meson, build,
                                              "--installed").items()
             if os.path.basename(src).startswith("tensord.cpython")]
    assert len(dests) == 1, dests
    if prefix == sysconfig.get_paths()["data"]:
        # the interpreter's own prefix for local installs (/usr/local)
        assert os.path.dirname(dests[0]) in sys.path, (dests[0], sys.path)
    else:
        # another prefix: meson's choice under it, for PYTHONPATH
        assert dests[0].startswith(prefix + "/"), (dests[0], prefix)
