"""What one identity may list and call under a ``Policy``: decisions, cached. Pure.

Rules:

1. Without a policy, or with one of no rules, everything is listed and callable for
   everyone. With one rule or more, nothing is unless a rule allows it (deny by default).
2. An action on an item is permitted when some ``allow`` rule for it matches and no
   ``deny`` rule for it does: a deny wins whatever the order of the rules, and no decision
   depends on the order items or rules arrived in (the rule a decision names is the
   matching deny, else the first matching allow in the document).
3. An item is callable only if it is listed: what an identity may not see it cannot use,
   and it is answered as an item that does not exist would be.
4. A condition that fails to evaluate (a type error, a missing map key) is false for an
   allow rule and true for a deny rule: an error never grants.
5. A rule with an ``arguments`` condition is decided at each call, after the rest: an
   allowing one grants the call when its arguments condition holds, a denying one refuses
   it when its condition holds (or fails).
6. Decisions are cached per identity (``IdentityView``, at most ``MAX_VIEWS`` of them, the
   least recently used going first) and per item within it; the cache is forgotten when
   the catalog changes (a tool's annotations are part of its decision) or the policy
   does. A prompt's or a resource's decision depends on its server and name alone.
   What an identity sees of a list (``visible``) is one tuple per distinct set of items,
   shared by every identity that sees the same.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .document import ANNOTATION_DEFAULTS, Condition, Policy, Rule
from .identity import LOCAL, Identity

log = logging.getLogger("trunkline.policy")

#: Identities whose decisions are kept at once.
MAX_VIEWS = 4096
#: Seconds between two warnings about one rule's failing condition.
_WARN_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class Item:
    """Something a rule is about: a tool (``name`` its own name on ``server``), a prompt,
    or a resource (``name`` its URI, or a template's text)."""

    kind: str  # "tool", "prompt", "resource"
    server: str
    name: str
    annotations: Mapping[str, Any] | None = field(default=None, compare=False)

    def facts(self) -> dict[str, Any]:
        """The item as conditions read it (``item`` in CEL)."""
        annotations = dict(ANNOTATION_DEFAULTS)
        if self.annotations:
            annotations.update(self.annotations)
        return {"kind": self.kind, "server": self.server, "name": self.name,
                "annotations": annotations}


@dataclass(frozen=True, slots=True)
class Denied:
    """Why an action is not permitted: the rule that refused it (None: no rule allowed
    it). The rule is the operator's to know (the audit trail); a client is told only that
    the action is not permitted."""

    rule: str | None
    #: The item is not even listed: answer as for an unknown one (rule 3).
    hidden: bool = False


@dataclass(frozen=True, slots=True)
class Allowed:
    """A permitted action and the rule that allowed it (None: no policy)."""

    rule: str | None


NO_POLICY = Allowed(None)
Decision = Allowed | Denied


@dataclass(slots=True)
class Verdict:
    """One identity's decisions about one item: whether it is listed, and the call's
    decision as far as it can be made without the call's arguments (rule 5)."""

    listed: Decision
    #: The call's decision when no ``arguments`` rule is left to run; else None.
    call: Decision | None
    #: Rules whose ``arguments`` condition runs at each call: denying ones first.
    deny_on_arguments: tuple[Rule, ...] = ()
    allow_on_arguments: tuple[Rule, ...] = ()
    #: The allow that holds without arguments, if any (a deny on arguments may still win).
    allowed_by: str | None = None


class IdentityView:
    """The decisions of one identity, made as they are asked for."""

    __slots__ = ("identity", "verdicts", "_facts", "_identity_only", "_context")

    def __init__(self, identity: Identity) -> None:
        self.identity = identity
        #: By ``(kind, server, name)``.
        self.verdicts: dict[tuple[str, str, str], Verdict] = {}
        self._facts: dict[str, Any] | None = None
        #: The value of each ``when`` that reads only the identity, by rule index.
        self._identity_only: dict[int, bool] = {}
        self._context: Any = None

    def facts(self) -> dict[str, Any]:
        if self._facts is None:
            self._facts = self.identity.facts()
        return self._facts

    def context(self, **more: Any) -> Any:
        """A CEL context holding the identity (converted once: a ``cel.Context`` kept
        for the view) and ``more`` (``item``, ``arguments``), set now."""
        if self._context is None:
            import cel

            self._context = cel.Context()
            self._context.add_variable("identity", self.facts())
        for name, value in more.items():
            self._context.add_variable(name, value)
        return self._context


K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """A dict bounded by count, least recently used out first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        if len(self._items) > self.size:
            self._items.popitem(last=False)

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


class Access:
    """The policy in force and its decisions (rules 1-6). ``Host`` holds one; the gateway
    asks it too. ``replace`` swaps the policy (a reload): decisions already made stand for
    what they admitted, new ones are the new policy's."""

    def __init__(self, policy: Policy | None = None, *, max_views: int = MAX_VIEWS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.active = policy is not None and policy.active
        self._views: _Lru[Identity, IdentityView] = _Lru(max_views)
        #: What an identity sees of a list: one tuple per distinct set (rule 6), under
        #: the list it was taken from (kept, so its ``id`` is not another's meanwhile).
        self._shown: _Lru[tuple[str, int, tuple[int, ...]],
                          tuple[Sequence[Any], tuple[Any, ...]]] = _Lru(max_views)
        self._warned: dict[str, float] = {}
        self._clock = clock
        #: Decisions counted by outcome, for the status document (never who).
        self.counts = {"allowed": 0, "denied": 0}

    def replace(self, policy: Policy | None) -> None:
        self.policy = policy
        self.active = policy is not None and policy.active
        self.forget()

    def forget(self) -> None:
        """The items changed (or the policy did): decide afresh."""
        self._views.clear()
        self._shown.clear()

    @property
    def identities(self) -> int:
        """Identities whose decisions are kept now."""
        return len(self._views)

    # -- asking ------------------------------------------------------------------------

    def view(self, identity: Identity | None) -> IdentityView:
        identity = LOCAL if identity is None else identity
        view = self._views.get(identity)
        if view is None:
            view = IdentityView(identity)
            self._views.put(identity, view)
        return view

    def verdict(self, view: IdentityView, item: Item) -> Verdict:
        key = (item.kind, item.server, item.name)
        verdict = view.verdicts.get(key)
        if verdict is None:
            verdict = view.verdicts[key] = self._decide(view, item)
        return verdict

    def tool_verdict(self, view: IdentityView, entry: Any) -> Verdict:
        """``verdict`` for a catalog ``ToolEntry`` (no ``Item`` made once it is known)."""
        verdict = view.verdicts.get(("tool", entry.server, entry.local_name))
        if verdict is None:
            verdict = self.verdict(view, tool_item(entry))
        return verdict

    def may_list(self, identity: Identity | None, item: Item) -> bool:
        if not self.active:
            return True
        return type(self.verdict(self.view(identity), item).listed) is Allowed

    def may_list_tool(self, identity: Identity | None, entry: Any) -> bool:
        """``may_list`` for a catalog ``ToolEntry`` (no ``Item`` made once decided)."""
        if not self.active:
            return True
        return type(self.tool_verdict(self.view(identity), entry).listed) is Allowed

    def may_call(self, identity: Identity | None, item: Item,
                 arguments: Mapping[str, Any] | None = None, *, count: bool = True
                 ) -> Decision:
        """The decision on using ``item`` now (``arguments``: the call's, for rule 5);
        ``count``: it is counted in ``counts`` (not when it is asked again to be told)."""
        if not self.active:
            return NO_POLICY
        view = self.view(identity)
        return self._counted(view, self.verdict(view, item), item, arguments, count)

    def may_call_tool(self, identity: Identity | None, entry: Any,
                      arguments: Mapping[str, Any] | None = None, *, count: bool = True
                      ) -> Decision:
        """``may_call`` for a catalog ``ToolEntry``."""
        if not self.active:
            return NO_POLICY
        # On every call: the common case (decided already, no arguments rule) inline.
        view = self.view(identity)
        verdict = view.verdicts.get(("tool", entry.server, entry.local_name))
        if verdict is None:
            verdict = self.verdict(view, tool_item(entry))
        decision = verdict.call
        if decision is None:
            return self._counted(view, verdict, tool_item(entry), arguments, count)
        if count:
            self.counts["allowed" if type(decision) is Allowed else "denied"] += 1
        return decision

    def _counted(self, view: IdentityView, verdict: Verdict, item: Item | None,
                 arguments: Mapping[str, Any] | None, count: bool) -> Decision:
        decision = verdict.call
        if decision is None:
            assert item is not None
            decision = self._on_arguments(view, item, verdict, arguments or {})
        if count:
            self.counts["allowed" if type(decision) is Allowed else "denied"] += 1
        return decision

    def tools_visible(self, identity: Identity | None, entries: Sequence[Any]
                      ) -> Sequence[Any]:
        """``visible`` for the catalog's ``ToolEntry``s."""
        if not self.active:
            return entries
        view = self.view(identity)
        return self._kept("tool", entries, [
            type(self.tool_verdict(view, e).listed) is Allowed for e in entries])

    def visible(self, identity: Identity | None, kind: str, items: Sequence[Any],
                item_of: Callable[[Any], Item]) -> Sequence[Any]:
        """The members of ``items`` (of one list, e.g. the catalog's entries) that
        ``identity`` may list, in their order; ``item_of`` says what each is. The same
        tuple for every identity that sees the same members (rule 6)."""
        if not self.active:
            return items
        view = self.view(identity)
        return self._kept(kind, items, [
            type(self.verdict(view, item_of(m)).listed) is Allowed for m in items])

    def _kept(self, kind: str, items: Sequence[Any], listed: list[bool]) -> tuple[Any, ...]:
        shown = tuple(i for i, yes in enumerate(listed) if yes)
        key = (kind, id(items), shown)
        kept = self._shown.get(key)
        if kept is None or kept[0] is not items:
            kept = (items, tuple(items[i] for i in shown))
            self._shown.put(key, kept)
        return kept[1]

    # -- deciding ----------------------------------------------------------------------

    def _decide(self, view: IdentityView, item: Item) -> Verdict:
        assert self.policy is not None
        item_facts: dict[str, Any] | None = None
        list_allow: str | None = None
        list_deny: str | None = None
        call_allow: str | None = None
        call_deny: str | None = None
        deny_args: list[Rule] = []
        allow_args: list[Rule] = []
        for rule in self.policy.rules:
            if not _about(rule, item):
                continue
            if rule.when is not None:
                if rule.when.reads_item and item_facts is None:
                    item_facts = item.facts()
                    view.context(item=item_facts)  # set once for this item's rules
                if not self._holds(rule, rule.when, view):
                    continue
            for action in rule.actions:
                if rule.arguments is not None:
                    (allow_args if rule.allow else deny_args).append(rule)
                elif action == "list":
                    if rule.allow:
                        list_allow = list_allow or rule.id
                    else:
                        list_deny = list_deny or rule.id
                elif rule.allow:
                    call_allow = call_allow or rule.id
                else:
                    call_deny = call_deny or rule.id
        if list_deny is not None or list_allow is None:
            hidden = Denied(list_deny, hidden=True)
            return Verdict(hidden, hidden)
        listed = Allowed(list_allow)
        if call_deny is not None:
            return Verdict(listed, Denied(call_deny))
        if not deny_args and (call_allow is not None or not allow_args):
            return Verdict(listed, Allowed(call_allow) if call_allow else Denied(None))
        return Verdict(listed, None, tuple(deny_args), tuple(allow_args), call_allow)

    def _on_arguments(self, view: IdentityView, item: Item, verdict: Verdict,
                      arguments: Mapping[str, Any]) -> Decision:
        """Rule 5: the call's decision once its arguments are known."""
        try:
            context = view.context(item=item.facts(), arguments=dict(arguments))
        except (ValueError, TypeError, OverflowError):  # not a CEL value (an int over 64 bits)
            context = None
        for rule in verdict.deny_on_arguments:
            assert rule.arguments is not None
            if self._evaluated(rule, rule.arguments, context, deny=True):
                return Denied(rule.id)
        if verdict.allowed_by is not None:
            return Allowed(verdict.allowed_by)
        for rule in verdict.allow_on_arguments:
            assert rule.arguments is not None
            if self._evaluated(rule, rule.arguments, context, deny=False):
                return Allowed(rule.id)
        return Denied(None)

    def _holds(self, rule: Rule, when: Condition, view: IdentityView) -> bool:
        """Whether ``when`` holds for the view's identity and the item its context holds
        now (one reading only the identity: once per identity)."""
        if not when.reads_item:
            known = view._identity_only.get(rule.index)
            if known is None:
                known = view._identity_only[rule.index] = self._evaluated(
                    rule, when, view.context(), deny=not rule.allow)
            return known
        return self._evaluated(rule, when, view.context(), deny=not rule.allow)

    def _evaluated(self, rule: Rule, condition: Condition, context: Any,
                   deny: bool) -> bool:
        """Rule 4: an error counts against the request (``context`` None: the values
        could not be made CEL's)."""
        try:
            if context is None:
                raise ValueError("the call's arguments are not values CEL holds")
            return condition.holds(context)
        except Exception as exc:  # noqa: BLE001 - any failure of a condition is rule 4's
            now = self._clock()
            if now - self._warned.get(rule.id, -_WARN_EVERY_S) >= _WARN_EVERY_S:
                self._warned[rule.id] = now
                log.warning("policy rule %r: %r failed (%s: %s); counted as %s", rule.id,
                            condition.text, type(exc).__name__, str(exc).splitlines()[0]
                            if str(exc) else "", "matching (a deny)" if deny else
                            "not matching (an allow)")
            return deny


def _about(rule: Rule, item: Item) -> bool:
    """Whether ``rule`` is about ``item`` (document rules 2-3), before its conditions."""
    kind = item.kind
    if kind not in rule.kinds:
        return False
    if rule.servers is not None and rule.servers.fullmatch(item.server) is None:
        return False
    pattern = rule.names[kind]
    if pattern is not None:
        name = f"{item.server}/{item.name}" if rule.qualified[kind] else item.name
        if pattern.fullmatch(name) is None:
            return False
    if rule.annotations:
        if kind != "tool":
            return False
        given = item.annotations or {}
        for key, wanted in rule.annotations.items():
            if given.get(key, ANNOTATION_DEFAULTS.get(key)) != wanted:
                return False
    return True


def tool_item(entry: Any) -> Item:
    """A catalog ``ToolEntry`` as a policy's item."""
    return Item("tool", entry.server, entry.local_name, entry.annotations)
