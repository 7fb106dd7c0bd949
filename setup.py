"""The package's one build step beyond pyproject.toml: the DSH plugin rides inside it.

dshloop's DSH plugin lives beside the apps in dsh-plugin/, with its built bundle committed
(lib/). A wheel carries the files `dsh plugin add` needs as dshloop/dsh-plugin/, so that
`dshloop dsh install` adds to a person's DSH the plugin of the very dshloop installed, with no
Node build on their machine. In a clone (and an editable install) the command finds dsh-plugin/
itself.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# What `dsh plugin add` reads: the manifest's bundle and client entries, the patch row, the bundles.
PLUGIN_FILES = ("package.json", "cordis.patch.yml", "manifest.json", "lib/index.js", "lib/client.js")


class BuildWithPlugin(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "dshloop" / "dsh-plugin"
        for name in PLUGIN_FILES:
            source = HERE / "dsh-plugin" / name
            if not source.is_file():
                raise FileNotFoundError(f"dsh-plugin/{name} is missing: the wheel would ship a broken DSH plugin")
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target / name)


setup(cmdclass={"build_py": BuildWithPlugin})
