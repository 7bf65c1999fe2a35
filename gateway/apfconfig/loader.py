"""Files and folders of Kubernetes YAML/JSON -> one validated ``ConfigSet``, or every error.

Accepts single documents, multi-document streams, ``kind: List``, ``FlowSchemaList`` and
``PriorityLevelConfigurationList`` (so ``kubectl get flowschemas,prioritylevelconfigurations -o
yaml`` output loads as is), in ``flowcontrol.apiserver.k8s.io/v1`` or ``v1beta3``. Documents of
other kinds (the gateway's own ``GatewayConfiguration``, a Pod in a ``List``) are skipped;
``load_documents`` hands them to whoever wants them. Each object goes through the API server's
steps: strict decoding, defaulting, validation; nothing is built unless all of it is clean.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gateway.apfconfig import schema
from gateway.apfconfig.configset import (
    MAX_DEPTH,
    VALUE_COST,
    ConfigError,
    ConfigErrors,
    ConfigLimits,
    ConfigSet,
)
from gateway.apfconfig.defaulting import (
    SUPPORTED_API_VERSIONS,
    default_flow_schema,
    default_priority_level,
)
from gateway.apfconfig.fielderrors import UNKNOWN_FIELD, FieldError, invalid, not_supported
from gateway.apfconfig.jsonvalues import kind_and_name, not_json
from gateway.apfconfig.serialize import (
    flow_schema_from_dict,
    fs_spec_from_dict,
    pl_spec_from_dict,
    priority_level_from_dict,
)
from gateway.apfconfig.validation import validate_flow_schema, validate_priority_level
from gateway.flowcontrol.objects import FlowSchema, PriorityLevelConfiguration

GROUP = "flowcontrol.apiserver.k8s.io"
FS_KIND = "FlowSchema"
PL_KIND = "PriorityLevelConfiguration"
LIST_KINDS = {"List": None, "FlowSchemaList": FS_KIND, "PriorityLevelConfigurationList": PL_KIND}
EXTENSIONS = (".yaml", ".yml", ".json")
DEFAULT_LIMITS = ConfigLimits()


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
                errors.append(_file_error(str(p), f"cannot list: {exc}", "unreadable"))
                continue
            files += sorted(
                f
                for f in entries
                if f.is_file() and f.suffix in EXTENSIONS and not f.name.startswith(".")
            )
        elif p.is_file():
            files.append(p)
        else:
            errors.append(_file_error(str(p), "no such file or directory", "unreadable"))
    return files


def _file_error(source: str, message: str, code: str, document: int | None = None) -> ConfigError:
    return ConfigError(source, document, "", "", "", message, code=code)


class _Budget:
    """What is left of ``max_bytes`` for the expanded documents of all files together."""

    def __init__(self, limits: ConfigLimits) -> None:
        self.limits = limits
        self.left = limits.max_bytes


def parse_text(
    text: str, source: str, limits: ConfigLimits = DEFAULT_LIMITS, budget: _Budget | None = None
) -> tuple[list[Document], list[ConfigError]]:
    """The mapping documents of one file. Size, nesting and aliases are checked on the event
    stream before any document is built, so a bomb is refused without being expanded."""
    budget = budget or _Budget(limits)
    if source.endswith(".json"):
        raw, errors = _parse_json(text, source, budget)
    else:
        raw, errors = _parse_yaml(text, source, budget)
    docs: list[Document] = []
    for i, obj in enumerate(raw, start=1):
        if obj is None:
            continue
        if not isinstance(obj, dict):
            msg = f"must be a mapping with apiVersion and kind, not {type(obj).__name__}"
            errors.append(ConfigError(source, i, "", "", "", msg))
            continue
        unjson = [ConfigError(source, i, *kind_and_name(obj), f, m) for f, m in not_json(obj)]
        if unjson:
            errors += unjson
            continue
        docs.append(Document(source, i, obj))
    return docs, errors


def _too_large(budget: _Budget) -> str:
    return (
        f"larger than {budget.limits.max_bytes} bytes (maxConfigBytes) with YAML aliases "
        f"expanded, each value counting {VALUE_COST} bytes besides its text"
    )


def _too_deep() -> str:
    return f"nested more than {MAX_DEPTH} levels deep"


def _parse_json(text: str, source: str, budget: _Budget) -> tuple[list[Any], list[ConfigError]]:
    if not text.strip():
        return [], []
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"invalid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"
        return [], [_file_error(source, msg, "syntax", 1)]
    except RecursionError:
        return [], [_file_error(source, _too_deep(), "too_large", 1)]
    # JSON has no aliases; the walk only checks nesting and the value count.
    size, depth = 0, 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        depth = max(depth, level)
        if isinstance(item, dict):
            stack += [(v, level + 1) for kv in item.items() for v in kv]
        elif isinstance(item, list):
            stack += [(v, level + 1) for v in item]
        size += VALUE_COST + (len(item) if isinstance(item, str) else 0)
    if depth > MAX_DEPTH:
        return [], [_file_error(source, _too_deep(), "too_large", 1)]
    if size > budget.left:
        return [], [_file_error(source, _too_large(budget), "too_large", 1)]
    budget.left -= size
    return [value], []


def _parse_yaml(text: str, source: str, budget: _Budget) -> tuple[list[Any], list[ConfigError]]:
    problem = _scan(text, budget)
    if problem is not None:
        return [], [problem.error(source)]
    raw: list[Any] = []
    loader = _StrictLoader(text)
    try:
        while loader.check_node():
            raw.append(loader.construct_document(loader.get_node()))
    except yaml.YAMLError as exc:
        return raw, [_file_error(source, _yaml_message(exc), "syntax", len(raw) + 1)]
    except RecursionError:  # the pure-Python parser recurses per level
        return raw, [_file_error(source, _too_deep(), "too_large", len(raw) + 1)]
    finally:
        loader.dispose()
    return raw, []


@dataclass(frozen=True, slots=True)
class _Problem:
    document: int
    message: str
    code: str

    def error(self, source: str) -> ConfigError:
        return _file_error(source, self.message, self.code, self.document or 1)


def _scan(text: str, budget: _Budget) -> _Problem | None:
    """One pass over the YAML events: syntax, nesting depth, recursive aliases, and the size
    with every alias counted as the full value it stands for. Nothing is built."""
    parser = _StrictLoader(text)
    document = 0
    used = 0
    anchors: dict[str, int] = {}  # anchor -> expanded size of its value
    open_nodes: list[tuple[int, str | None]] = []  # (used at start, anchor)
    try:
        while parser.check_event():
            event = parser.get_event()  # type: ignore[no-untyped-call]
            cost = 0
            if isinstance(event, yaml.DocumentStartEvent):
                document += 1
                anchors.clear()  # anchors are scoped to their document
            elif isinstance(event, yaml.ScalarEvent):
                cost = len(event.value) + VALUE_COST
                if event.anchor is not None:
                    anchors[event.anchor] = cost
            elif isinstance(event, yaml.AliasEvent):
                if any(anchor == event.anchor for _, anchor in open_nodes):
                    return _Problem(document, f"recursive alias *{event.anchor}", "too_large")
                cost = anchors.get(str(event.anchor), 0)  # undefined: the composer reports it
            elif isinstance(event, yaml.CollectionStartEvent):
                cost = VALUE_COST
                open_nodes.append((used, event.anchor))
                if len(open_nodes) > MAX_DEPTH:
                    return _Problem(document, _too_deep(), "too_large")
            elif isinstance(event, yaml.CollectionEndEvent):
                start, anchor = open_nodes.pop()
                if anchor is not None:
                    anchors[anchor] = used - start
            used += cost
            if used > budget.left:
                return _Problem(document, _too_large(budget), "too_large")
    except yaml.YAMLError as exc:
        return _Problem(max(document, 1), _yaml_message(exc), "syntax")
    finally:
        parser.dispose()
    budget.left -= used
    return None


def _yaml_message(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        problem = exc.problem or "invalid YAML"
        context = f" ({exc.context})" if exc.context else ""
        return f"invalid YAML: line {mark.line + 1}, column {mark.column + 1}: {problem}{context}"
    return f"invalid YAML: {exc}"


def _object_count(doc: Document) -> int:
    items = doc.obj.get("items") if _list_kind(doc.obj) else None
    return 1 + len(items) if isinstance(items, list) else 1


def _list_kind(obj: Mapping[str, Any]) -> str | None:
    kind = obj.get("kind")
    return kind if isinstance(kind, str) and kind in LIST_KINDS else None


def read_documents(
    paths: Sequence[str | os.PathLike[str]], limits: ConfigLimits
) -> tuple[list[Document], list[ConfigError], list[str]]:
    """Documents, reading errors, and the file order for sorting errors (``build_config``)."""
    errors: list[ConfigError] = []
    docs: list[Document] = []
    files = _files(paths, errors)
    budget = _Budget(limits)
    total = 0
    for f in files:
        try:
            with f.open("rb") as stream:  # never more than the limit, even if the file grows
                data = stream.read(limits.max_bytes - total + 1)
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(_file_error(str(f), f"cannot read: {exc}", "unreadable"))
            continue
        total += len(data)
        if total > limits.max_bytes:
            msg = f"the configuration files together are larger than {limits.max_bytes} bytes"
            errors.append(_file_error(str(f), msg + " (maxConfigBytes)", "too_large"))
            break
        d, e = parse_text(text, str(f), limits, budget)
        if not d and not e:
            msg = "holds no documents; an empty (or half-written) file is refused"
            errors.append(_file_error(str(f), msg, "empty"))
        docs += d
        errors += e
    return _counted(docs, errors, limits), errors, [str(p) for p in paths] + [str(f) for f in files]


def _counted(
    docs: list[Document], errors: list[ConfigError], limits: ConfigLimits
) -> list[Document]:
    """``docs``, or none (and an error) when they hold more than ``max_objects`` objects."""
    count = sum(map(_object_count, docs))
    if count <= limits.max_objects:
        return docs
    msg = f"{count} objects, more than {limits.max_objects} (maxConfigObjects)"
    errors.append(_file_error(docs[-1].file, msg, "too_large"))
    return []


def load_documents(
    paths: Sequence[str | os.PathLike[str]], limits: ConfigLimits = DEFAULT_LIMITS
) -> list[Document]:
    """Every mapping document of every file, any kind; raises ``ConfigErrors`` on bad syntax,
    an empty file, or a configuration beyond ``limits``."""
    docs, errors, order = read_documents(paths, limits)
    if errors:
        raise ConfigErrors(_sorted(errors, docs, order), limit=limits.max_errors)
    return docs


def load_paths(
    paths: Sequence[str | os.PathLike[str]], limits: ConfigLimits = DEFAULT_LIMITS
) -> ConfigSet:
    docs, errors, order = read_documents(paths, limits)
    return build_config(docs, errors, file_order=order, limits=limits)


def load_text(
    text: str, *, source: str = "<string>", limits: ConfigLimits = DEFAULT_LIMITS
) -> ConfigSet:
    docs, errors = parse_text(text, source, limits)
    return build_config(_counted(docs, errors, limits), errors, limits=limits)


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
        kind = _list_kind(doc.obj)
        if kind is not None:
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
                implied = LIST_KINDS[kind]
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
        doc.file,
        doc.index,
        item,
        kind if isinstance(kind, str) else "",
        name if isinstance(name, str) else "",
    )
    if not isinstance(kind, str) and kind is not None:
        errors.append(where.field_error(invalid("kind", kind, "must be a string")))
        return
    if not kind:
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
    limits: ConfigLimits = DEFAULT_LIMITS,
) -> ConfigSet:
    """Decode, default and validate every object; raise ``ConfigErrors`` listing the problems
    (at most ``limits.max_errors``, the rest counted) in file order (``file_order``, else first
    appearance), then document and list item."""
    docs = list(docs)
    errors = list(errors or [])
    fss: list[FlowSchema] = []
    pls: list[PriorityLevelConfiguration] = []
    seen: dict[tuple[str, str], _Where] = {}
    dropped = 0
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
        if field_errs:
            # Kept errors are bounded; an object's own list is dropped right after this.
            room = max(limits.max_errors + 1 - len(errors), 0)
            errors += [where.field_error(e) for e in field_errs[:room]]
            dropped += len(field_errs) - min(room, len(field_errs))
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
        raise ConfigErrors(_sorted(errors, docs, file_order), limit=limits.max_errors, more=dropped)
    return ConfigSet(tuple(fss), tuple(pls))


def _sorted(
    errors: list[ConfigError], docs: Sequence[Document], file_order: Sequence[str]
) -> list[ConfigError]:
    rank: dict[str, int] = {}
    for name in [*file_order, *(d.file for d in docs), *(e.file for e in errors)]:
        rank.setdefault(name, len(rank))
    return sorted(errors, key=lambda e: (rank[e.file], e.document or 0, e.item or 0))


def _fixed_check(fs_kind: bool) -> Callable[[str, Mapping[str, Any]], bool]:
    return flow_schema_spec_differs if fs_kind else priority_level_spec_differs


def _never(name: str, spec: Mapping[str, Any]) -> bool:
    return False


# ------------------------------------------------------------------ the shipped objects
# Built here rather than in ``bootstrap`` (the public face over them): the mandatory objects'
# specs are what ``build_config`` checks user objects against, so loading them belongs to the
# loader, and ``bootstrap`` imports the loader, never the reverse.
MANDATORY_FILE = "mandatory.yaml"
SUGGESTED_FILE = "suggested.yaml"


def shipped_text(file_name: str) -> str:
    """A YAML file of ``gateway/apfconfig/bootstrap/`` (package data)."""
    folder = resources.files("gateway.apfconfig").joinpath("bootstrap")
    return folder.joinpath(file_name).read_text(encoding="utf-8")


@functools.cache
def shipped(file_name: str, fixed_specs: bool) -> ConfigSet:
    docs, errors = parse_text(shipped_text(file_name), file_name)
    return build_config(docs, errors, fixed_specs=fixed_specs)


def shipped_mandatory() -> ConfigSet:
    # The mandatory objects define the fixed specs, so they are not checked against themselves.
    return shipped(MANDATORY_FILE, False)


def flow_schema_spec_differs(name: str, spec: Mapping[str, Any]) -> bool:
    """Whether a defaulted wire-form spec differs from mandatory FlowSchema ``name``'s fixed spec
    (semantic equality: an empty list equals an absent one)."""
    want = shipped_mandatory().flow_schema(name)
    try:
        return want is None or fs_spec_from_dict(spec) != want.spec
    except (KeyError, ValueError, TypeError):  # not even representable: certainly different
        return True


def priority_level_spec_differs(name: str, spec: Mapping[str, Any]) -> bool:
    """Like ``flow_schema_spec_differs``; for ``exempt`` the ``spec.exempt`` field is ignored,
    since an admin may change it."""
    want = shipped_mandatory().priority_level(name)
    try:
        have = pl_spec_from_dict(spec)
    except (KeyError, ValueError, TypeError):
        return True
    if want is None:
        return True
    if name == "exempt":
        have = replace(have, exempt=want.spec.exempt)
    return have != want.spec
