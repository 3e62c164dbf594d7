"""Types of the native module (src/*.rs), checked by mypy in the tests."""

from typing import Any, Awaitable, Dict, List, Optional, Tuple

KEY_VERSION: int

class ToolDefinition:
    def __init__(
        self,
        name: str,
        description: str,
        cls: str,
        key: str = "default",
        natural_fields: Optional[List[str]] = None,
        natural_window: Optional[float] = None,
        ttl: Optional[float] = None,
        timeout: Optional[float] = None,
        max_attempts: Optional[int] = None,
        has_reconcile: bool = False,
        key_version: Optional[int] = None,
        store_args: bool = True,
    ) -> None: ...
    def bind(
        self,
        runner: Any,
        is_async: bool,
        reconcile: Optional[Any] = None,
        reconcile_is_async: bool = False,
    ) -> "ToolDefinition": ...
    @property
    def name(self) -> str: ...
    @property
    def cls(self) -> str: ...

class Context:
    """The call a tool function is running for."""

    @property
    def key(self) -> Optional[str]: ...
    def sub_key(self, label: str) -> Optional[str]: ...
    @property
    def tool(self) -> str: ...
    @property
    def cls(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def call_id(self) -> Optional[str]: ...
    @property
    def run_id(self) -> Optional[str]: ...
    @property
    def step(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def superseded(self) -> bool: ...

class CallResult:
    """A successful call's output and how it was obtained."""

    @property
    def output(self) -> Any: ...
    @property
    def deduplicated(self) -> bool: ...
    @property
    def key(self) -> Optional[str]: ...
    @property
    def attempts(self) -> int: ...
    @property
    def tool(self) -> str: ...
    @property
    def cls(self) -> str: ...
    @property
    def edited(self) -> Optional[Dict[str, Any]]:
        """Set when an approver edited the arguments before approving:
        ``{"by", "original_key", "arguments"}``; the arguments as called
        never ran."""

class Executor:
    def __init__(
        self,
        store: str,
        *,
        namespace: Optional[str] = None,
        approvals: Any = None,
        lease: Optional[float] = None,
        ttl: Optional[float] = None,
        timeout: Optional[float] = None,
        reject_in_flight: bool = False,
        worker: Optional[str] = None,
        approval_wait: Optional[float] = None,
    ) -> None: ...
    @property
    def store(self) -> str: ...
    @property
    def replaying(self) -> bool: ...
    def replay(self) -> "Executor": ...
    def call(self, request: Tuple[Any, ...]) -> CallResult: ...
    def acall(self, request: Tuple[Any, ...]) -> Awaitable[CallResult]: ...

def canonical(args: Any) -> Tuple[str, str]: ...
def derive(tool: str, source: str, **parts: Any) -> str: ...
def sub_key(key: str, label: str) -> str: ...
