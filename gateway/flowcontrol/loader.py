"""Files and folders of Kubernetes YAML/JSON -> one validated ``ConfigSet``, or every error.

Accepts single documents, multi-document streams, ``kind: List``, ``FlowSchemaList`` and
``PriorityLevelConfigurationList`` (so ``kubectl get flowschemas,prioritylevelconfigurations -o
yaml`` output loads as is), in ``flowcontrol.apiserver.k8s.io/v1`` or ``v1beta3``. Documents of
other kinds (the gateway's own ``GatewayConfiguration``, a Pod in a ``List``) are skipped;
``load_documents`` hands them to whoever wants them. Each object goes through the API server's
steps: strict decoding, defaulting, validation; nothing is built unless all of it is clean.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gateway.flowcontrol import schema
from gateway.flowcontrol.configset import ConfigError, ConfigErrors, ConfigSet
from gateway.flowcontrol.defaulting import (
    SUPPORTED_API_VERSIONS,
    default_flow_schema,
    default_priority_level,
)
from gateway.flowcontrol.fielderrors import UNKNOWN_FIELD, FieldError, not_supported
from gateway.flowcontrol.objects import FlowSchema, PriorityLevelConfiguration
from gateway.flowcontrol.serialize import flow_schema_from_dict, priority_level_from_dict
from gateway.flowcontrol.validation import validate_flow_schema, validate_priority_level

GROUP = "flowcontrol.apiserver.k8s.io"
FS_KIND = "FlowSchema"
PL_KIND = "PriorityLevelConfiguration"
LIST_KINDS = {"List": None, "FlowSchemaList": FS_KIND, "PriorityLevelConfigurationList": PL_KIND}
EXTENSIONS = (".yaml", ".yml", ".json")


@dataclass(frozen=True, slots=True)
class Document:
    """One top-level YAML/JSON document; ``index`` counts from 1 within its file."""

    file: str
    index: int
    obj: dict[str, Any]

    @property
    def obj_dict(self) -> dict[str, Any]:
        return self.obj


# libyaml's parser when present: the pure-Python one is ~10x slower on large kubectl dumps.
if TYPE_CHECKING:
    _BaseLoader = yaml.SafeLoader
else:
    _BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BaseLoader):
    """Safe YAML that refuses duplicate keys (as strict decoding does) and keeps times as text."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str | int | float | bool | None):
                continue  # SafeLoader reports unhashable keys itself
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate field {key!r}", key_node.start_mark
                )
            seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


_StrictLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for ch, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}


def _files(paths: Sequence[str | os.PathLike[str]], errors: list[ConfigError]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            try:
                entries = list(p.iterdir())
            except OSError as exc:
                errors.append(ConfigError(str(p), None, "", "", "", f"cannot list: {exc}"))
                continue
            files += sorted(
                f
                for f in entries
                if f.is_file() and f.suffix in EXTENSIONS and not f.name.startswith(".")
            )
        elif p.is_file():
            files.append(p)
        else:
            errors.append(ConfigError(str(p), None, "", "", "", "no such file or directory"))
    return files


def parse_text(text: str, source: str) -> tuple[list[Document], list[ConfigError]]:
    docs: list[Document] = []
    errors: list[ConfigError] = []
    if source.endswith(".json"):
        try:
            raw: list[Any] = [json.loads(text)]
        except json.JSONDecodeError as exc:
            msg = f"line {exc.lineno}, column {exc.colno}: {exc.msg}"
            return [], [ConfigError(source, 1, "", "", "", f"invalid JSON: {msg}")]
    else:
        raw = []
        try:
            raw.extend(yaml.load_all(text, Loader=_StrictLoader))
        except yaml.YAMLError as exc:
            errors.append(ConfigError(source, len(raw) + 1, "", "", "", _yaml_message(exc)))
    for i, obj in enumerate(raw, start=1):
        if obj is None:
            continue
        if not isinstance(obj, dict):
            msg = f"must be a mapping with apiVersion and kind, not {type(obj).__name__}"
            errors.append(ConfigError(source, i, "", "", "", msg))
            continue
        docs.append(Document(source, i, obj))
    return docs, errors


def _yaml_message(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        problem = exc.problem or "invalid YAML"
        context = f" ({exc.context})" if exc.context else ""
        return f"invalid YAML: line {mark.line + 1}, column {mark.column + 1}: {problem}{context}"
    return f"invalid YAML: {exc}"


def _read(
    paths: Sequence[str | os.PathLike[str]],
) -> tuple[list[Document], list[ConfigError], list[str]]:
    errors: list[ConfigError] = []
    docs: list[Document] = []
    files = _files(paths, errors)
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(ConfigError(str(f), None, "", "", "", f"cannot read: {exc}"))
            continue
        d, e = parse_text(text, str(f))
        docs += d
        errors += e
    return docs, errors, [str(p) for p in paths] + [str(f) for f in files]


def load_documents(paths: Sequence[str | os.PathLike[str]]) -> list[Document]:
    """Every mapping document of every file, any kind; raises ``ConfigErrors`` on bad syntax."""
    docs, errors, _ = _read(paths)
    if errors:
        raise ConfigErrors(errors)
    return docs


def load_paths(paths: Sequence[str | os.PathLike[str]]) -> ConfigSet:
    docs, errors, order = _read(paths)
    return build_config(docs, errors, file_order=order)


def load_text(text: str, *, source: str = "<string>") -> ConfigSet:
    docs, errors = parse_text(text, source)
    return build_config(docs, errors)


@dataclass(frozen=True, slots=True)
class _Where:
    file: str
    document: int
    item: int | None
    kind: str
    name: str

    def error(self, field: str, message: str) -> ConfigError:
        return ConfigError(
            self.file, self.document, self.kind, self.name, field, message, self.item
        )

    def field_error(self, err: FieldError) -> ConfigError:
        if err.type == UNKNOWN_FIELD:
            return self.error("", err.body())
        return self.error(err.field, err.body())


def _objects(
    docs: Iterable[Document], errors: list[ConfigError]
) -> Iterable[tuple[_Where, dict[str, Any]]]:
    """The FlowSchema/PLC objects in the documents, lists expanded, other kinds skipped."""
    for doc in docs:
        kind = doc.obj.get("kind")
        if kind in LIST_KINDS:
            items = doc.obj.get("items") or []
            if not isinstance(items, list):
                errors.append(
                    ConfigError(doc.file, doc.index, str(kind), "", "items", "must be a list")
                )
                continue
            for n, item in enumerate(items, start=1):
                if not isinstance(item, dict):
                    errors.append(
                        ConfigError(
                            doc.file, doc.index, "", "", "", "list item must be a mapping", n
                        )
                    )
                    continue
                implied = LIST_KINDS[str(kind)]
                if implied is not None:
                    defaults = {"kind": implied, "apiVersion": doc.obj.get("apiVersion")}
                    yield from _one(doc, n, {**defaults, **item}, errors)
                else:
                    yield from _one(doc, n, item, errors)
        else:
            yield from _one(doc, None, doc.obj, errors)


def _one(
    doc: Document, item: int | None, obj: dict[str, Any], errors: list[ConfigError]
) -> Iterable[tuple[_Where, dict[str, Any]]]:
    kind, api = obj.get("kind"), obj.get("apiVersion")
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    where = _Where(
        doc.file, doc.index, item, str(kind or ""), name if isinstance(name, str) else ""
    )
    if not kind or not isinstance(kind, str):
        errors.append(
            where.error("kind", "Required value: every document needs apiVersion and kind")
        )
        return
    if kind in (FS_KIND, PL_KIND):
        if api not in SUPPORTED_API_VERSIONS:
            errors.append(
                where.field_error(not_supported("apiVersion", api, SUPPORTED_API_VERSIONS))
            )
            return
        yield where, obj
    elif isinstance(api, str) and api.split("/")[0] == GROUP:
        errors.append(where.field_error(not_supported("kind", kind, (FS_KIND, PL_KIND))))


def build_config(
    docs: Iterable[Document],
    errors: list[ConfigError] | None = None,
    *,
    fixed_specs: bool = True,
    file_order: Sequence[str] = (),
) -> ConfigSet:
    """Decode, default and validate every object; raise ``ConfigErrors`` listing all problems,
    in file order (``file_order``, else first appearance), then document and list item."""
    docs = list(docs)
    errors = list(errors or [])
    fss: list[FlowSchema] = []
    pls: list[PriorityLevelConfiguration] = []
    seen: dict[tuple[str, str], _Where] = {}
    for where, obj in _objects(docs, errors):
        fs_kind = where.kind == FS_KIND
        field_errs: list[FieldError] = []
        clean = schema.decode(
            obj, schema.FLOW_SCHEMA if fs_kind else schema.PRIORITY_LEVEL, "", field_errs
        )
        if not field_errs:
            differs = _fixed_check(fs_kind) if fixed_specs else _never
            if fs_kind:
                clean = default_flow_schema(clean)
                field_errs = validate_flow_schema(clean, differs)
            else:
                clean = default_priority_level(clean, str(obj.get("apiVersion")))
                field_errs = validate_priority_level(clean, differs)
        errors += [where.field_error(e) for e in field_errs]
        if field_errs:
            continue
        key = (where.kind, where.name)
        if key in seen:
            first = seen[key]
            errors.append(
                where.error(
                    "metadata.name",
                    f'Duplicate value: "{where.name}": also defined in '
                    f"{first.file}: document {first.document}",
                )
            )
            continue
        seen[key] = where
        if fs_kind:
            fss.append(flow_schema_from_dict(clean))
        else:
            pls.append(priority_level_from_dict(clean))
    if errors:
        rank: dict[str, int] = {}
        for name in [*file_order, *(d.file for d in docs), *(e.file for e in errors)]:
            rank.setdefault(name, len(rank))
        errors.sort(key=lambda e: (rank[e.file], e.document or 0, e.item or 0))
        raise ConfigErrors(errors)
    return ConfigSet(tuple(fss), tuple(pls))


def _fixed_check(fs_kind: bool) -> Callable[[str, Mapping[str, Any]], bool]:
    from gateway.flowcontrol import bootstrap

    return bootstrap.flow_schema_spec_differs if fs_kind else bootstrap.priority_level_spec_differs


def _never(name: str, spec: Mapping[str, Any]) -> bool:
    return False
