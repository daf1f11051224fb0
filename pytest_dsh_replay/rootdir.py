"""The rootdir and ini file decided again without ``--dsh-scenario`` values (harness.md §3).

pytest picks the rootdir and ini file from the free arguments BEFORE installed plugins are loaded, so
the value of ``--dsh-scenario ../elsewhere`` (space form) is taken for a test path: the rootdir moves
out of the project and its ini file (``dsh_backend``, ``addopts``, ...) is ignored. Once the option is
known, :func:`redetermine` decides them again from the real free arguments. An explicit ``-c``/
``--rootdir`` is left alone; ``--dsh-scenario=PATH`` never had the problem.

This uses pytest internals (``_pytest.config.findpaths.determine_setup`` and the config's
``_rootpath``, ``_inipath``, ``_inicfg``, ``_inicache``), the same in every pytest of
:data:`SUPPORTED_PYTEST`; ``tests/plugin/test_rootdir.py`` pins them. When they are missing it warns
and leaves pytest's choice alone.
"""

from __future__ import annotations

import sys

import pytest

__all__ = ["SUPPORTED_PYTEST", "redetermine"]

#: the pytest major versions whose internals this module was written against (``pytest>=8``)
SUPPORTED_PYTEST = (8, 9)
#: the config attributes it replaces
CONFIG_ATTRIBUTES = ("_rootpath", "_inipath", "_inicfg", "_inicache")


def redetermine(early_config: pytest.Config, args: list[str], parser: pytest.Parser) -> None:
    """Decide the rootdir and ini file again from the free arguments (see the module doc).

    ``args`` gets the new ini file's ``addopts`` prepended (what pytest would have done), and they are
    parsed into the early namespace; the ini's ``pythonpath`` entries go on ``sys.path``.
    """
    ns = early_config.known_args_namespace
    if not getattr(ns, "dsh_scenario", None) or ns.inifilename or ns.rootdir:
        return
    from _pytest.config.findpaths import determine_setup

    try:
        rootpath, inipath, inicfg, *_ = determine_setup(
            inifile=None,
            override_ini=ns.override_ini,
            args=ns.file_or_dir,
            rootdir_cmd_arg=None,
            invocation_dir=early_config.invocation_params.dir,
        )
    except pytest.UsageError:
        return
    if (rootpath, inipath) == (early_config.rootpath, early_config.inipath):
        return
    old_confcutdir = str(early_config.inipath.parent if early_config.inipath else early_config.rootpath)
    if not all(hasattr(early_config, a) for a in CONFIG_ATTRIBUTES):
        early_config.issue_config_time_warning(
            pytest.PytestConfigWarning(
                f"--dsh-scenario {ns.dsh_scenario[0]} made pytest take {early_config.rootpath} as rootdir; "
                "write --dsh-scenario=PATH (one argument) or pass -c to keep your project's ini file"
            ),
            stacklevel=2,
        )
        return
    early_config._rootpath = rootpath
    early_config._inipath = inipath
    early_config._inicfg = inicfg
    early_config._inicache.clear()
    parser.extra_info["rootdir"] = str(rootpath)
    parser.extra_info["inifile"] = str(inipath)
    if ns.confcutdir == old_confcutdir:
        ns.confcutdir = str(inipath.parent if inipath else rootpath)
    for entry in reversed(early_config.getini("pythonpath")):  # pytest's cleanup removes them again
        sys.path.insert(0, str(entry))
    addopts = list(early_config.getini("addopts"))
    if addopts:  # what pytest would have prepended had it found this ini file in the first place
        args[:] = addopts + args
        early_config.pluginmanager.consider_preparse(addopts, exclude_only=False)
        parser.parse_known_args(args, namespace=ns)
