"""Everything ``--config`` paths hold: one GatewayConfiguration plus FlowSchemas and
PriorityLevelConfigurations, loaded and validated together so a reload is all or nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.apfconfig import loader
from gateway.apfconfig.configset import ConfigErrors, ConfigLimits, ConfigSet, more_errors
from gateway.apfconfig.ensure import effective_config
from gateway.settings.load import (
    COMMAND_LINE,
    SettingsError,
    build_settings,
    gateway_document,
    settings_from_document,
    stated_keys,
)
from gateway.settings.model import KIND, GatewaySettings


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    settings: GatewaySettings
    # None: the paths hold no flow-control objects, so the bootstrap defaults apply.
    flow: ConfigSet | None
    # What the gateway serves: ``flow`` after one pass of Kubernetes' ensurer, the very set
    # ``apf-gateway config validate --effective`` prints.
    effective: ConfigSet
    # The GatewayConfiguration keys the document and the flags state (dotted camelCase), and
    # where that document is ("gw.yaml: document 1", or "command line" without one).
    stated: frozenset[str]
    where: str


class ConfigLoadError(Exception):
    """``reason`` says why, for the reload metric: "invalid" (validation), "unreadable",
    "empty", "too_large", "syntax", or "security_key_missing" (refused reloads only)."""

    def __init__(self, errors: list[str], *, more: int = 0, reason: str = "invalid") -> None:
        self.errors = errors
        self.more = more
        self.reason = reason
        lines = errors + ([more_errors(more)] if more else [])
        super().__init__("invalid configuration:\n  " + "\n  ".join(lines))


def load_config(
    paths: Sequence[str | Path],
    overrides: dict[str, Any] | None = None,
    limits: ConfigLimits | None = None,
) -> LoadedConfig:
    """Raises ``ConfigLoadError`` listing the problems in every file. ``limits`` bound the
    reading; by default those the flags set (a reload passes the running configuration's)."""

    if limits is None:
        try:
            limits = build_settings([], overrides).config_limits
        except SettingsError as exc:
            raise ConfigLoadError(exc.errors) from exc
    docs, read_errors, order = loader.read_documents(list(paths), limits)
    errors: list[str] = []
    more = 0
    reason = "invalid"
    loaded: tuple[GatewaySettings, frozenset[str], str] | None = None
    try:
        source, index, doc = gateway_document([(d.file, d.index, d.obj) for d in docs], overrides)
        where = source if source == COMMAND_LINE else f"{source}: document {index}"
        loaded = settings_from_document(source, index, doc), stated_keys(doc), where
    except SettingsError as exc:
        errors.extend(exc.errors)
    flow: ConfigSet | None = None
    flow_docs = [d for d in docs if d.obj.get("kind") != KIND]
    if flow_docs or read_errors:
        try:
            flow = loader.build_config(flow_docs, read_errors, file_order=order, limits=limits)
        except ConfigErrors as exc:
            errors.extend(str(e) for e in exc.errors)
            more, reason = exc.more, exc.reason
        else:
            if len(flow) == 0:
                flow = None
    if errors or loaded is None:
        keep = errors[: limits.max_errors]
        raise ConfigLoadError(keep, more=more + len(errors) - len(keep), reason=reason)
    settings, stated, where = loaded
    exact = settings.flow_control_objects == "exact"
    return LoadedConfig(settings, flow, effective_config(flow, exact=exact), stated, where)


def watched_files(paths: Sequence[str | Path], settings: GatewaySettings) -> list[Path]:
    """The files whose change triggers a reload: config files, credential files, the TLS
    listener's certificates and keys, and the client CA bundles."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(f for f in p.iterdir() if f.suffix in (".yaml", ".yml", ".json")))
        else:
            out.append(p)
    auth = settings.authentication
    tls = settings.tls
    files = [auth.token_auth_file, auth.authentication_config, auth.webhook.config_file,
             auth.openwhisk_keys_file, auth.client_ca_file,
             auth.request_header.client_ca_file, tls.cert_file, tls.private_key_file]  # fmt: skip
    for pair in tls.sni_cert_keys:
        files += [pair.cert_file, pair.key_file]
    out.extend(Path(f) for f in files if f)
    return out
