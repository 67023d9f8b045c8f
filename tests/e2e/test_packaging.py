"""The distribution is fenceline-inference (the name fenceline on the public index is another
project's); the import name and the command stay fenceline. .ci/wheel checks the manylinux
wheel with auditwheel."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import fenceline

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "fenceline-inference"


def test_distribution_name_is_the_free_one_and_the_readme_says_it() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(rf'^\[project\]\n(?:#.*\n)*name = "{DISTRIBUTION}"$', pyproject, re.M)
    assert re.search(r'^\[project.scripts\]\nfenceline = "fenceline.cli:main"$', pyproject, re.M)
    assert f"**`{DISTRIBUTION}`**" in (ROOT / "README.md").read_text()


def test_installed_distribution_provides_the_fenceline_package_and_command() -> None:
    dist = metadata.distribution(DISTRIBUTION)
    assert dist.version == fenceline.__version__
    [script] = [e for e in dist.entry_points if e.group == "console_scripts"]
    assert (script.name, script.value) == ("fenceline", "fenceline.cli:main")


def test_ci_checks_the_wheel_with_auditwheel() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^\.ci/wheel$", run, re.M)
    wheel = (ROOT / ".ci" / "wheel").read_text()
    assert "auditwheel repair" in wheel and "auditwheel show" in wheel
    assert "FENCELINE_GSTREAMER=OFF" in wheel
