"""Everything ``--config`` paths hold: one GatewayConfiguration plus FlowSchemas and
PriorityLevelConfigurations, loaded and validated together so a reload is all or nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.flowcontrol.configset import ConfigErrors, ConfigSet
from gateway.settings.load import SettingsError, build_settings
from gateway.settings.model import GatewaySettings


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    settings: GatewaySettings
    # None: the paths hold no flow-control objects, so the bootstrap defaults apply.
    flow: ConfigSet | None


class ConfigLoadError(Exception):
    def __init__(self, errors: list[str]) -> None:
        super().__init__("invalid configuration:\n  " + "\n  ".join(errors))
        self.errors = errors


def load_config(
    paths: Sequence[str | Path], overrides: dict[str, Any] | None = None
) -> LoadedConfig:
    """Raises ``ConfigLoadError`` listing every problem in every file."""
    from gateway.flowcontrol import loader

    errors: list[str] = []
    try:
        docs = loader.load_documents(list(paths)) if paths else []
    except ConfigErrors as exc:
        raise ConfigLoadError([str(e) for e in exc.errors]) from exc
    settings: GatewaySettings | None = None
    try:
        settings = build_settings([(d.file, d.index, d.obj) for d in docs], overrides)
    except SettingsError as exc:
        errors.extend(exc.errors)
    flow: ConfigSet | None = None
    flow_docs = [d for d in docs if d.obj.get("kind") != "GatewayConfiguration"]
    if flow_docs:
        try:
            flow = loader.build_config(flow_docs)
        except ConfigErrors as exc:
            errors.extend(str(e) for e in exc.errors)
        else:
            if len(flow) == 0:
                flow = None
    if errors or settings is None:
        raise ConfigLoadError(errors)
    return LoadedConfig(settings, flow)


def watched_files(paths: Sequence[str | Path], settings: GatewaySettings) -> list[Path]:
    """The files whose change triggers a reload: config files and credential files."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(f for f in p.iterdir() if f.suffix in (".yaml", ".yml", ".json")))
        else:
            out.append(p)
    auth = settings.authentication
    for f in (auth.token_auth_file, auth.openwhisk_keys_file):
        if f:
            out.append(Path(f))
    return out
