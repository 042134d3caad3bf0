"""The authorization policy as the operator writes it, checked and compiled: a ``Policy``.

A policy is a JSON object (inline as the configuration's ``policy``, or a file it names)::

    {"claims": {"groups": "groups", "roles": "realm_access.roles"},
     "rules": [
       {"id": "support-tickets", "allow": ["list", "call"], "servers": ["tickets"]},
       {"id": "read-only", "allow": ["list", "call"], "tools": ["*"],
        "annotations": {"readOnlyHint": true}},
       {"id": "delete-needs-admin", "deny": ["call"], "tools": ["*/delete_*"],
        "when": "!('admin' in identity.scopes)"},
       {"id": "fs-tmp-only", "allow": ["call"], "tools": ["fs/write_file"],
        "arguments": "arguments.path.startsWith('/tmp/')"}]}

Rules of the document (each broken one refuses the whole policy with ``PolicyError``,
naming the rule and what is wrong):

1. ``rules`` is a list; each rule has a unique ``id`` (a non-empty string) and exactly one
   of ``allow`` or ``deny``: the actions it grants or forbids, a list of ``list`` (the item
   is shown: ``tools/list``, a search, ``prompts/list``, ``resources/list``) and ``call``
   (it is used: ``tools/call``, ``prompts/get``, ``resources/read`` and subscriptions,
   completion of its arguments).
2. What a rule is about: ``servers`` (globs of configured server names), and per kind of
   item ``tools`` (globs of a tool's own name on its server, or ``server/name``),
   ``prompts`` (the same for prompts) and ``resources`` (globs of URIs, or of a template's
   text). A rule naming none of the three applies to every kind; one naming some applies to
   those only. ``*`` in a glob matches anything, ``/`` included; matching is case-sensitive.
3. ``annotations`` (tools only): the tool's annotation values it requires, the
   specification's defaults standing in for those a tool leaves out (``readOnlyHint``
   false, ``destructiveHint`` true, ``idempotentHint`` false, ``openWorldHint`` true).
   They are the server's hints, not guarantees: a rule granting on them trusts the server.
4. ``when``: a CEL expression over ``identity`` (``kind``, ``subject``, ``issuer``,
   ``scopes``, ``groups``, ``roles``, ``client_id``, ``email``, ``attributes``) and
   ``item`` (``kind``, ``server``, ``name``, ``annotations``), true for the rule to apply.
   ``arguments``: a CEL expression over those and ``arguments`` (the call's), for a rule
   whose actions are ``call`` only. Each compiles when the policy loads; one that names
   anything else, or does not parse, refuses the policy.
5. ``claims`` names the token claims that carry groups and roles (``identity.ClaimNames``).
6. What could never match is a warning, not an error (``Policy.warnings``): a ``when``
   that is constantly false, ``servers`` naming no configured server, ``annotations`` on a
   rule about prompts or resources only, a field of ``identity`` or ``item`` that neither
   has (``identity.group``: CEL's maps are dynamic, so it compiles). A macro's own
   variable (``identity.groups.exists(g, ...)``) is no variable read.

How rules decide is ``decisions``'.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .identity import ClaimNames

ACTIONS = ("list", "call")
#: The kinds of item and the rule field naming each.
KINDS = {"tool": "tools", "prompt": "prompts", "resource": "resources"}
#: The specification's value of each tool annotation a tool leaves out (rule 3).
ANNOTATION_DEFAULTS: dict[str, Any] = {"readOnlyHint": False, "destructiveHint": True,
                                       "idempotentHint": False, "openWorldHint": True}
#: The variables a ``when`` may read, and an ``arguments`` condition (rule 4).
WHEN_VARIABLES = frozenset({"identity", "item"})
ARGUMENT_VARIABLES = WHEN_VARIABLES | {"arguments"}
_FIELDS = frozenset({"id", "allow", "deny", "servers", "tools", "prompts", "resources",
                     "annotations", "when", "arguments", "description"})
#: The variable a CEL macro binds: ``.exists(x, ...)``, ``.all(x, ...)``, ...
_BOUND = re.compile(r"\.(?:all|exists|exists_one|map|filter)\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")
#: The longest policy file read.
MAX_POLICY_BYTES = 4 << 20


class PolicyError(ValueError):
    """A policy that cannot be used: the message names where (the rule's id) and why."""


@dataclass(frozen=True, slots=True)
class Condition:
    """A compiled CEL expression: ``program`` (a ``cel.Program``), its text, and the
    variables it reads."""

    text: str
    program: Any = field(repr=False)
    reads: frozenset[str]

    @property
    def reads_item(self) -> bool:
        return "item" in self.reads

    def holds(self, context: Any) -> bool:
        """Whether it is true in ``context``; raises for an error or a non-boolean."""
        value = self.program.execute(context)
        if not isinstance(value, bool):
            raise TypeError(f"the condition is a {type(value).__name__}, not a bool")
        return value


@dataclass(frozen=True, slots=True)
class Rule:
    """One compiled rule (rules 1-4). ``index`` is its place in the document, which
    decides nothing but which allowing rule a decision names."""

    id: str
    allow: bool
    actions: frozenset[str]
    #: The kinds of item it is about (rule 2).
    kinds: frozenset[str]
    servers: re.Pattern[str] | None
    #: Per kind: the pattern of names (or URIs) it is about; None: any.
    names: Mapping[str, re.Pattern[str] | None]
    #: Per kind: whether its name globs are ``server/name`` ones.
    qualified: Mapping[str, bool]
    annotations: Mapping[str, Any]
    when: Condition | None
    arguments: Condition | None
    index: int


@dataclass(frozen=True)
class Policy:
    """The compiled policy: its rules, the claims it reads, and where it came from."""

    rules: tuple[Rule, ...]
    claims: ClaimNames = field(default_factory=ClaimNames)
    #: Where it was read (a path, or ``the configuration``), for messages.
    origin: str = "the configuration"
    #: The SHA-256 of the document as read, to tell one version of a policy from another.
    digest: str = ""

    @property
    def active(self) -> bool:
        """Whether it decides anything: a policy with no rules lets everything through
        (deny by default holds once a rule is configured)."""
        return bool(self.rules)

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        """The policy in the file at ``path``; ``PolicyError`` when it cannot be read or
        is not a policy."""
        try:
            with open(path, "rb") as f:
                text = f.read(MAX_POLICY_BYTES + 1)
        except OSError as exc:
            raise PolicyError(f"{path}: cannot read the policy: {exc.strerror}") from None
        if len(text) > MAX_POLICY_BYTES:
            raise PolicyError(f"{path}: the policy is larger than {MAX_POLICY_BYTES} bytes")
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise PolicyError(f"{path}: not JSON: {exc}") from None
        return cls.compile(document, origin=str(path),
                           digest=hashlib.sha256(text).hexdigest())

    @classmethod
    def compile(cls, document: Any, *, origin: str = "the configuration",
                digest: str | None = None) -> Policy:
        """The policy ``document`` says (rules 1-5), compiled."""
        where = f"{origin}: "
        if not isinstance(document, dict):
            raise PolicyError(f"{where}a policy is an object with \"rules\"")
        unknown = set(document) - {"rules", "claims", "description"}
        if unknown:
            raise PolicyError(f"{where}unknown policy field {sorted(unknown)[0]!r} (one of "
                              "rules, claims, description)")
        rules = document.get("rules", [])
        if not isinstance(rules, list):
            raise PolicyError(f"{where}\"rules\" is a list of rules")
        compiled: list[Rule] = []
        seen: set[str] = set()
        for index, raw in enumerate(rules):
            rule = _rule(raw, index, where)
            if rule.id in seen:
                raise PolicyError(f"{where}rule {rule.id!r}: a second rule with this id")
            seen.add(rule.id)
            compiled.append(rule)
        if digest is None:
            digest = hashlib.sha256(orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
                                    ).hexdigest()
        return cls(tuple(compiled), _claims(document.get("claims"), where), origin, digest)

    def warnings(self, servers: Iterable[str] = ()) -> list[str]:
        """What in it could never match (rule 6), given the configured ``servers``."""
        names = list(servers)
        said = []
        for rule in self.rules:
            if rule.servers is not None and names and \
                    not any(rule.servers.fullmatch(n) for n in names):
                said.append(f"rule {rule.id!r} names no configured server: it can never "
                            "match")
            if rule.annotations and "tool" not in rule.kinds:
                said.append(f"rule {rule.id!r} requires tool annotations but is about "
                            "no tools: it can never match")
            for condition in (rule.when, rule.arguments):
                if condition is None:
                    continue
                if not condition.reads and _constant(condition) is False:
                    said.append(f"rule {rule.id!r}: {condition.text!r} is always false: "
                                "it can never match")
                missing = _missing_field(condition)
                if missing is not None:
                    said.append(f"rule {rule.id!r}: {condition.text!r} reads a field no "
                                f"identity or item has ({missing}): it fails, and counts as "
                                f"{'not matching' if rule.allow else 'matching'}")
        return said


def _rule(raw: Any, index: int, where: str) -> Rule:
    if not isinstance(raw, dict):
        raise PolicyError(f"{where}rule {index + 1} is not an object")
    rule_id = raw.get("id")
    if not isinstance(rule_id, str) or not rule_id.strip():
        raise PolicyError(f"{where}rule {index + 1} has no \"id\" (a non-empty string)")
    here = f"{where}rule {rule_id!r}: "
    unknown = set(raw) - _FIELDS
    if unknown:
        raise PolicyError(f"{here}unknown field {sorted(unknown)[0]!r}")
    if ("allow" in raw) == ("deny" in raw):
        raise PolicyError(f"{here}needs exactly one of \"allow\" and \"deny\"")
    allow = "allow" in raw
    actions = raw["allow" if allow else "deny"]
    if isinstance(actions, str):
        actions = [actions]
    if not isinstance(actions, list) or not actions or \
            any(a not in ACTIONS for a in actions):
        raise PolicyError(f"{here}\"{'allow' if allow else 'deny'}\" is a list of actions, "
                          f"each one of {list(ACTIONS)}")
    named = [kind for kind, key in KINDS.items() if key in raw]
    kinds = frozenset(named or KINDS)
    names: dict[str, re.Pattern[str] | None] = {}
    qualified: dict[str, bool] = {}
    for kind in kinds:
        globs = _globs(raw.get(KINDS[kind]), f"{here}\"{KINDS[kind]}\"")
        names[kind] = _pattern(globs)
        qualified[kind] = kind != "resource" and globs is not None and \
            any("/" in g for g in globs)
        if qualified[kind] and not all("/" in g for g in globs or ()):
            raise PolicyError(f"{here}\"{KINDS[kind]}\" mixes server/name globs with bare "
                              "names: write each as server/name (\"*/name\" for any server)")
    annotations = raw.get("annotations", {})
    if not isinstance(annotations, dict) or not all(
            isinstance(v, (bool, str)) for v in annotations.values()):
        raise PolicyError(f"{here}\"annotations\" is an object of booleans (or strings)")
    when = _condition(raw.get("when"), WHEN_VARIABLES, f"{here}\"when\"")
    arguments = _condition(raw.get("arguments"), ARGUMENT_VARIABLES,
                           f"{here}\"arguments\"")
    if arguments is not None and set(actions) != {"call"}:
        raise PolicyError(f"{here}an \"arguments\" condition decides calls only: its "
                          "actions are [\"call\"]")
    if arguments is not None and "tool" not in kinds:
        raise PolicyError(f"{here}an \"arguments\" condition is about tool calls: name "
                          "\"tools\"")
    return Rule(rule_id, allow, frozenset(actions), kinds,
                _pattern(_globs(raw.get("servers"), f"{here}\"servers\"")), names,
                qualified, dict(annotations), when, arguments, index)


def _globs(value: Any, what: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or \
            not all(isinstance(g, str) and g for g in value):
        raise PolicyError(f"{what} is a list of globs (non-empty strings)")
    return value


def _pattern(globs: Sequence[str] | None) -> re.Pattern[str] | None:
    """One regular expression for ``globs`` (``fullmatch``); None for none given."""
    if globs is None or "*" in globs:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in globs))


def _condition(text: Any, allowed: frozenset[str], what: str) -> Condition | None:
    if text is None:
        return None
    if not isinstance(text, str) or not text.strip():
        raise PolicyError(f"{what} is a CEL expression (a non-empty string)")
    import cel  # only once a policy has a condition

    try:
        program = cel.compile(text)
    except ValueError as exc:
        first = str(exc).splitlines()[0]
        raise PolicyError(f"{what} does not compile: {first}") from None
    # A macro's own variable (``identity.groups.exists(g, g.startsWith('eng-'))``) is
    # one the expression binds, not one it reads.
    reads = frozenset(program.variables()) - frozenset(_BOUND.findall(text))
    stray = sorted(reads - allowed)
    if stray:
        raise PolicyError(f"{what} reads {stray[0]!r}, which is not one of "
                          f"{sorted(allowed)}")
    return Condition(text, program, reads)


def _constant(condition: Condition) -> bool | None:
    """The value of a condition that reads nothing, if it has one."""
    try:
        return condition.holds({})
    except Exception:  # noqa: BLE001 - an error is not a constant
        return None


#: Every field an identity and an item have (values of the right types), to try a
#: condition on: one that reads a field neither has fails on it (a misspelt name).
_SAMPLE = {
    "identity": {"kind": "user", "subject": "s", "issuer": "", "scopes": [], "groups": [],
                 "roles": [], "client_id": "", "email": "", "attributes": {}},
    "item": {"kind": "tool", "server": "s", "name": "n",
             "annotations": dict(ANNOTATION_DEFAULTS)}}


def _missing_field(condition: Condition) -> str | None:
    """A field the condition reads of ``identity`` or ``item`` that neither has (a
    misspelt name: ``identity.group``), found by trying it on ``_SAMPLE``."""
    try:
        condition.holds(_SAMPLE)
    except KeyError as exc:
        name = exc.args[0] if exc.args else None
        for variable in ("identity", "item"):
            if isinstance(name, str) and name not in _SAMPLE[variable] and \
                    re.search(rf"\b{variable}\.{re.escape(name)}\b", condition.text):
                return f"{variable}.{name}"
    except Exception:  # noqa: BLE001 - other failures depend on the values: not a typo
        return None
    return None


def _claims(value: Any, where: str) -> ClaimNames:
    if value is None:
        return ClaimNames()
    if not isinstance(value, dict) or set(value) - {"groups", "roles"} or \
            not all(isinstance(v, str) and v for v in value.values()):
        raise PolicyError(f"{where}\"claims\" names the claims of groups and roles: "
                          "{\"groups\": NAME, \"roles\": NAME}")
    return ClaimNames(**value)
