"""Skills served over MCP (the extension ``io.modelcontextprotocol/skills``, SEP-2640): what a
skill entry is, and whether a file read for it is what the entry described. Pure: JSON in,
values or a ``SkillMismatch`` out.

Rules (SEP-2640, "Skill Entries" and "Integrity and Verification"):

1. An entry is ``{uri, frontmatter, resources}``: ``uri`` the skill's ``SKILL.md`` (a URI
   ending in ``/SKILL.md`` with a scheme), ``frontmatter`` an object with a string
   ``name`` and ``description``, ``resources`` a list of ``{uri, digest, size}`` or the
   string ``"dynamic"``. Each listed file's ``digest`` is ``sha256:`` and 64 lowercase hex
   digits, its ``size`` a byte count, its ``uri`` the skill's ``SKILL.md`` or a file under
   the skill's root (no ``.`` or ``..`` segment), each once, and ``SKILL.md`` among them;
   at most 512 files and 16 MiB in all. Anything else is no entry (``entry``:
   ``ValueError`` naming what), and is never loaded.
2. A file is fetched only when asked for (``resources/read``), never ahead of need; what
   comes back is checked against its entry before anyone sees it: its byte count against
   ``size`` first (a different length fails without hashing), then its SHA-256 against
   ``digest``. A file the entry does not list is not read at all: the entry is complete,
   so an unlisted file is a change to the skill.
3. A ``SKILL.md`` is also parsed (its leading ``---`` YAML block) and compared field by
   field with the entry's ``frontmatter``: a field missing on one side, or different, is
   a mismatch. The YAML is read safely and strictly: no aliases (a few bytes must not
   expand into a large document), string keys only, no key twice, and dates kept as the
   text they were written as (JSON has no dates: the entry carries the text).
4. A skill whose ``resources`` is ``"dynamic"`` offers no digests: only rule 3 applies to
   it, and only when its caller accepts that.

The bytes of a file are those of its ``resources/read`` content: a ``text`` item's UTF-8
encoding, a ``blob`` item's base64-decoded bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The extension's identifier, under ``capabilities.extensions``.
SKILLS = "io.modelcontextprotocol/skills"
#: A skill's required file, the last segment of its URI.
SKILL_MD = "SKILL.md"
#: ``resources`` of a skill whose content is generated (no digests).
DYNAMIC = "dynamic"
#: A directory resource's ``mimeType`` (``resources/directory/read``).
DIRECTORY_MIME = "inode/directory"
#: The per-skill limits every host accepts (SEP-2640, "Limits").
MAX_FILES = 512
MAX_TOTAL_BYTES = 16 * 1024 * 1024

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class SkillResource:
    """One file of a skill as its entry describes it: its URI, the SHA-256 of its bytes
    (``sha256:<hex>``) and their count."""

    uri: str
    digest: str
    size: int


@dataclass(frozen=True)
class SkillEntry:
    """One server's skill, as its ``skills/list`` or ``skills/get`` entry described it.

    ``server`` is the host's name for the server it came from: a skill is the pair of
    that server and ``uri`` (another server's skill at the same URI is another skill).
    ``name`` is unique among the entries of the listing it came in
    (``catalog.skills.skill_names``). ``resources`` is None for a ``"dynamic"`` skill.
    ``raw`` is the entry as the server sent it."""

    server: str
    uri: str
    frontmatter: Mapping[str, Any]
    resources: tuple[SkillResource, ...] | None
    name: str
    raw: Mapping[str, Any]

    @property
    def path(self) -> str:
        """The skill's path: its URI without the scheme and ``/SKILL.md``
        (``skill://acme/billing/refunds/SKILL.md`` -> ``acme/billing/refunds``)."""
        return skill_path(self.uri) or self.uri

    @property
    def description(self) -> str:
        return str(self.frontmatter.get("description", ""))

    @property
    def dynamic(self) -> bool:
        return self.resources is None

    def resource(self, uri: str) -> SkillResource | None:
        """The listed file at ``uri``, or None."""
        return next((r for r in self.resources or () if r.uri == uri), None)

    def file_uri(self, path: str) -> str:
        """The URI of the file at ``path`` relative to the skill's root (or ``path`` itself
        when it is a URI already)."""
        if "://" in path:
            return path
        return f"{skill_root(self.uri)}/{path.lstrip('/')}"


class SkillMismatch(Exception):
    """What was read is not what the entry described (``kind``: ``size``, ``digest``,
    ``frontmatter``, ``unlisted`` or ``unreadable``); the content is never used."""

    def __init__(self, kind: str, uri: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.uri = uri
        self.message = message


def skill_path(uri: str) -> str | None:
    """The path of the skill whose ``SKILL.md`` is at ``uri`` (None: not such a URI)."""
    scheme, sep, rest = uri.partition("://")
    if not scheme or not sep or not rest.endswith("/" + SKILL_MD):
        return None
    path = rest[: -len(SKILL_MD) - 1]
    return path or None


def skill_root(uri: str) -> str:
    """The directory of the skill whose ``SKILL.md`` is at ``uri``, without a trailing
    slash (``skill://git-workflow/SKILL.md`` -> ``skill://git-workflow``)."""
    return uri[: -len(SKILL_MD) - 1] if uri.endswith("/" + SKILL_MD) else uri


def within(root: str, uri: str) -> bool:
    """Whether ``uri`` names a file under the directory ``root`` (ending in ``/``): no
    ``.`` or ``..`` segment may take it elsewhere."""
    if not uri.startswith(root) or uri == root:
        return False
    return all(segment not in ("", ".", "..") for segment in uri[len(root):].split("/"))


def entry(server: str, raw: Any, name: str | None = None) -> SkillEntry:
    """The entry ``raw`` (rule 1), of ``server``, named ``name`` (default: its path), or
    ``ValueError`` saying what is wrong with it."""
    if not isinstance(raw, dict):
        raise ValueError("a skill entry is an object")
    uri = raw.get("uri")
    if not isinstance(uri, str) or skill_path(uri) is None:
        raise ValueError(f"a skill's uri is the URI of its {SKILL_MD} (got {uri!r})")
    frontmatter = raw.get("frontmatter")
    if not isinstance(frontmatter, dict):
        raise ValueError(f"skill {uri}: its frontmatter is an object")
    for field in ("name", "description"):
        if not isinstance(frontmatter.get(field), str):
            raise ValueError(f"skill {uri}: its frontmatter has no string {field!r}")
    listed = raw.get("resources")
    resources = None if listed == DYNAMIC else _resources(uri, listed)
    return SkillEntry(server, uri, frontmatter, resources,
                      name if name is not None else skill_path(uri) or uri, raw)


def _resources(uri: str, listed: Any) -> tuple[SkillResource, ...]:
    if not isinstance(listed, list):
        raise ValueError(f"skill {uri}: its resources are a list or {DYNAMIC!r}")
    if len(listed) > MAX_FILES:
        raise ValueError(f"skill {uri}: {len(listed)} files, over the limit of {MAX_FILES}")
    root = skill_root(uri) + "/"
    files: dict[str, SkillResource] = {}
    for item in listed:
        if not isinstance(item, dict):
            raise ValueError(f"skill {uri}: a listed file is an object")
        file_uri, digest, size = item.get("uri"), item.get("digest"), item.get("size")
        if not isinstance(file_uri, str) or not within(root, file_uri):
            raise ValueError(f"skill {uri}: file {file_uri!r} is not within the skill")
        if file_uri in files:
            raise ValueError(f"skill {uri}: file {file_uri} is listed twice")
        if not isinstance(digest, str) or _DIGEST.fullmatch(digest) is None:
            raise ValueError(f"skill {uri}: file {file_uri} has no sha256:<hex> digest")
        if type(size) is not int or size < 0:
            raise ValueError(f"skill {uri}: file {file_uri} has no byte size")
        files[file_uri] = SkillResource(file_uri, digest, size)
    if uri not in files:
        raise ValueError(f"skill {uri}: its resources do not list its {SKILL_MD}")
    total = sum(f.size for f in files.values())
    if total > MAX_TOTAL_BYTES:
        raise ValueError(f"skill {uri}: {total} bytes in all, over the limit of "
                         f"{MAX_TOTAL_BYTES}")
    return tuple(files.values())


def content(result: Any, uri: str) -> tuple[bytes, str | None]:
    """The bytes and ``mimeType`` of ``uri`` in a ``resources/read`` result: its item for
    that URI (or its only item), a ``text``'s UTF-8 or a ``blob``'s base64-decoded bytes."""
    items = result.get("contents") if isinstance(result, dict) else None
    if not isinstance(items, list):
        raise SkillMismatch("unreadable", uri, f"{uri}: the resources/read result has no "
                            "contents")
    items = [i for i in items if isinstance(i, dict)]
    item = next((i for i in items if i.get("uri") == uri), items[0] if len(items) == 1 else None)
    if item is None:
        raise SkillMismatch("unreadable", uri, f"{uri}: the resources/read result holds "
                            f"{len(items)} contents, none of them for this URI")
    mime = item.get("mimeType")
    mime = mime if isinstance(mime, str) else None
    if isinstance(item.get("text"), str):
        return item["text"].encode("utf-8", "surrogatepass"), mime
    if isinstance(item.get("blob"), str):
        try:
            return base64.b64decode(item["blob"], validate=True), mime
        except (binascii.Error, ValueError):
            raise SkillMismatch("unreadable", uri, f"{uri}: its blob is not base64") from None
    raise SkillMismatch("unreadable", uri, f"{uri}: its content has neither text nor blob")


def check_file(listed: SkillResource, data: bytes) -> None:
    """Rule 2: ``data`` is the file ``listed`` describes, or ``SkillMismatch``."""
    if len(data) != listed.size:
        raise SkillMismatch("size", listed.uri, f"{listed.uri}: {len(data)} bytes read, the "
                            f"skill's entry says {listed.size}")
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    if digest != listed.digest:
        raise SkillMismatch("digest", listed.uri, f"{listed.uri}: its SHA-256 is {digest}, "
                            f"the skill's entry says {listed.digest}")


def check_frontmatter(skill: SkillEntry, data: bytes) -> dict[str, Any]:
    """Rule 3: the frontmatter of ``data`` (the skill's ``SKILL.md``) is the entry's, or
    ``SkillMismatch`` naming the fields that differ; the parsed frontmatter."""
    try:
        parsed = frontmatter(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SkillMismatch("frontmatter", skill.uri, f"{skill.uri}: {exc}") from None
    differ = [key for key in sorted({*parsed, *skill.frontmatter})
              if key not in parsed or key not in skill.frontmatter
              or not same(parsed[key], skill.frontmatter[key])]
    if differ:
        raise SkillMismatch("frontmatter", skill.uri, f"{skill.uri}: its frontmatter differs "
                            f"from the skill's entry in {', '.join(map(repr, differ))}")
    return parsed


_FRONTMATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


def frontmatter(text: str) -> dict[str, Any]:
    """The YAML frontmatter of a ``SKILL.md`` (rule 3), or ``ValueError``."""
    match = _FRONTMATTER.match(text)
    if match is None:
        raise ValueError(f"{SKILL_MD} does not begin with a --- YAML frontmatter block")
    import yaml  # only a skill's load needs it

    try:
        parsed = yaml.load(match.group(1), Loader=_loader())
    except yaml.YAMLError as exc:
        raise ValueError(f"its frontmatter is not YAML: {exc}") from None
    if not isinstance(parsed, dict):
        raise ValueError("its frontmatter is not a mapping")
    return parsed


def same(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value (``1`` and ``1.0`` alike, a boolean never a
    number), objects key by key, arrays item by item."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b and not (isinstance(a, float) and math.isnan(a))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


_LOADER: type | None = None


def _loader() -> type:
    """PyYAML's ``SafeLoader``, stricter (rule 3)."""
    global _LOADER
    if _LOADER is None:
        import yaml

        class StrictLoader(yaml.SafeLoader):
            def compose_node(self, parent: Any, index: Any) -> Any:
                if self.check_event(yaml.AliasEvent):
                    raise yaml.YAMLError("aliases are not allowed in frontmatter")
                return super().compose_node(parent, index)

            def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
                keys = set()
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=deep)
                    if not isinstance(key, str):
                        raise yaml.YAMLError(f"frontmatter keys are strings, not {key!r}")
                    if key in keys:
                        raise yaml.YAMLError(f"frontmatter key {key!r} is given twice")
                    keys.add(key)
                return super().construct_mapping(node, deep=True)

        # A date stays the text it was written as: the entry (JSON) can only carry that.
        StrictLoader.yaml_implicit_resolvers = {
            first: [(tag, regexp) for tag, regexp in resolvers
                    if tag != "tag:yaml.org,2002:timestamp"]
            for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
        _LOADER = StrictLoader
    return _LOADER


def declared(capabilities: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The settings a server declared for the skills extension, or None when it did not."""
    extensions = (capabilities or {}).get("extensions")
    settings = extensions.get(SKILLS) if isinstance(extensions, dict) else None
    return settings if isinstance(settings, dict) else None


__all__ = [
    "DYNAMIC", "SKILLS", "SKILL_MD", "SkillEntry", "SkillMismatch", "SkillResource",
    "check_file", "check_frontmatter", "content", "declared", "entry", "frontmatter",
    "same", "skill_path", "skill_root",
]
