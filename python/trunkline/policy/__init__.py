"""Who may see and call what: identities, the operator's policy, and the decisions.

Pure and parent-side: ``identity`` (who a request speaks for), ``document`` (the policy as
the operator writes it, compiled, its conditions in CEL), ``decisions`` (what one identity
may list and call, cached). The ``Host`` enforces the decisions for tools; the gateway
for prompts and resources, and says who made each request.
"""

from .decisions import Access, Denied, Item
from .document import Policy, PolicyError
from .identity import LOCAL, ClaimNames, Identity, IdentityRefused

__all__ = ["LOCAL", "Access", "ClaimNames", "Denied", "Identity", "IdentityRefused", "Item",
           "Policy", "PolicyError"]
