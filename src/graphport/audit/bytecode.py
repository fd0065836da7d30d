"""What a code object can do to Python state, read once from its bytecode.

The audit watches only the instructions that matter: writes (`STORE_ATTR`, `STORE_SUBSCR`,
`STORE_GLOBAL`, `STORE_DEREF`, their `DELETE_` forms, `setattr`/`delattr` calls) and the
reads of globals and attributes that may bake a Python value into the graph. An instruction
does not say which object it writes to: that object is on the value stack, which Python
code cannot read. So the stack is simulated here, symbolically, over each code object: every
slot holds the expression that loaded it when that expression is a plain chain of loads
(`self.cache`, `CONFIG["k"]`, a closure variable), and `None` when it is anything else. At
run time the audit re-evaluates the chain of the write's target in the frame, just before the
instruction runs, and so finds the object it writes to.

Expressions are tuples: ("fast", name), ("global", name), ("deref", name), ("const", value),
("attr", base, name), ("item", base, key), and ("call", callee, args) for the calls that only
name a namespace (`globals()`, `vars(obj)`), so that writes through them have a target.
"""
from __future__ import annotations

import dis
from dataclasses import dataclass, field
from types import CodeType

_NULL = "NULL"   # the slot 3.11 pushes below a callable that is not a bound method

_WRITE_OPS = {"STORE_ATTR", "DELETE_ATTR", "STORE_SUBSCR", "DELETE_SUBSCR", "STORE_GLOBAL", "DELETE_GLOBAL",
              "STORE_DEREF", "DELETE_DEREF"}
_NO_FALLTHROUGH = {"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "RETURN_VALUE", "RAISE_VARARGS",
                   "RERAISE"}
_STACK_UNTOUCHED = {"NOP", "RESUME", "EXTENDED_ARG", "CACHE", "KW_NAMES", "JUMP_FORWARD", "JUMP_BACKWARD",
                    "JUMP_BACKWARD_NO_INTERRUPT", "COPY_FREE_VARS", "MAKE_CELL", "PRECALL"}


@dataclass(frozen=True)
class WriteSite:
    """One write instruction: `op` ("attr", "item", "global", "deref", each maybe deleted), the
    expression of the object written to (None for globals and cells), and the name or key."""
    op: str
    target: tuple | None
    name: object
    line: int


@dataclass(frozen=True)
class CallSite:
    """One call: the expression of the callee and those of its positional arguments (None
    where an argument is not a chain of loads), so the audit can find what a call writes to."""
    callee: tuple
    args: tuple


_NAMESPACE_CALLS = {("global", "globals"): 0, ("global", "vars"): 1}   # callee -> its argument count


@dataclass
class CodeSites:
    """The instructions of one code object the audit watches."""
    writes: dict[int, WriteSite] = field(default_factory=dict)    # instruction offset -> write
    reads: dict[int, list[tuple]] = field(default_factory=dict)   # line -> expressions read there
    calls: dict[int, CallSite] = field(default_factory=dict)      # offset -> the call

    @property
    def empty(self) -> bool:
        return not self.writes and not self.reads and not self.calls


_cache: dict[CodeType, CodeSites] = {}
_CACHE_LIMIT = 20_000


def sites(code: CodeType) -> CodeSites:
    """The watched instructions of `code`, computed once per code object."""
    found = _cache.get(code)
    if found is None:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        found = _cache[code] = _scan(code)
    return found


def describe(expr: tuple | None) -> str:
    """Source-like text of an expression: `self.cfg.scale`, `CACHE['k']`."""
    if expr is None:
        return "<expression>"
    kind = expr[0]
    if kind in ("fast", "global", "deref"):
        return expr[1]
    if kind == "const":
        return repr(expr[1])
    if kind == "attr":
        return f"{describe(expr[1])}.{expr[2]}"
    if kind == "call":
        return f"{describe(expr[1])}({', '.join(map(describe, expr[2]))})"
    return f"{describe(expr[1])}[{describe(expr[2])}]"


def _scan(code: CodeType) -> CodeSites:
    found = CodeSites()
    stack: list = []
    saved: dict[int, list] = {}   # jump target offset -> stack on arrival by the jump
    line = code.co_firstlineno
    falls_through = True

    def pop(n: int = 1) -> list:
        taken = [stack.pop() if stack else None for _ in range(n)]
        taken.reverse()
        return taken

    def peek(depth: int):
        return stack[-depth] if len(stack) >= depth else None

    for ins in dis.get_instructions(code):
        if ins.positions is not None and ins.positions.lineno is not None:
            line = ins.positions.lineno
        if not falls_through:
            stack = list(saved.get(ins.offset, []))
        elif ins.offset in saved and len(saved[ins.offset]) != len(stack):
            stack = [None] * len(stack)   # two paths meet with different contents: nothing known
        op, arg = ins.opname, ins.arg
        falls_through = op not in _NO_FALLTHROUGH
        if op in _WRITE_OPS:
            _record_write(found, op, ins.argval, peek, line, ins.offset)
        if ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs:
            after_jump = list(stack)
            effect = dis.stack_effect(ins.opcode, arg, jump=True)
            del after_jump[max(0, len(after_jump) + min(effect, 0)):]
            after_jump += [None] * max(effect, 0)
            saved[ins.offset if ins.argval is None else ins.argval] = after_jump
        if op in _STACK_UNTOUCHED:
            if op == "PRECALL":
                _record_call(found, arg, stack, line, ins.offset)
            continue
        if op == "LOAD_FAST":
            stack.append(("fast", ins.argval))
        elif op == "LOAD_GLOBAL":
            if arg & 1:
                stack.append(_NULL)
            stack.append(("global", ins.argval))
            found.reads.setdefault(line, []).append(stack[-1])
        elif op in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
            stack.append(("deref", ins.argval))
        elif op == "LOAD_CONST":
            stack.append(("const", ins.argval))
        elif op == "PUSH_NULL":
            stack.append(_NULL)
        elif op == "LOAD_ATTR":
            (base,) = pop()
            stack.append(("attr", base, ins.argval) if _is_expr(base) else None)
            if stack[-1] is not None:
                found.reads.setdefault(line, []).append(stack[-1])
        elif op == "LOAD_METHOD":
            (base,) = pop()
            stack += [("attr", base, ins.argval) if _is_expr(base) else None, None]
        elif op == "BINARY_SUBSCR":
            base, key = pop(2)
            stack.append(("item", base, key) if _is_expr(base) and _is_expr(key) and key[0] == "const" else None)
        elif op == "COPY":
            stack.append(peek(arg))
        elif op == "SWAP":
            if len(stack) >= arg:
                stack[-1], stack[-arg] = stack[-arg], stack[-1]
            else:
                stack = [None] * arg
        elif op == "CALL":
            callee, args = _callee_and_args(stack, arg)
            pop(arg + 2)
            namespace = _NAMESPACE_CALLS.get(callee) if callee is not None else None
            stack.append(("call", callee, args) if namespace == len(args) and all(map(_is_expr, args)) else None)
        else:
            effect = dis.stack_effect(ins.opcode, arg, jump=False) if ins.opcode >= dis.HAVE_ARGUMENT \
                else dis.stack_effect(ins.opcode, jump=False)
            pops, pushes = _pops_pushes(ins, effect)
            pop(pops)
            stack += [None] * pushes
    return found


def _is_expr(slot) -> bool:
    return isinstance(slot, tuple)


def _pops_pushes(ins: dis.Instruction, effect: int) -> tuple[int, int]:
    """Slots an instruction consumes and produces; where only the net effect is known, an
    operator producing a value is taken to consume its top operand (UNARY_*, GET_ITER)."""
    if effect < 0:
        return -effect, 0
    return (1, 1) if effect == 0 else (0, effect)


def _record_write(found: CodeSites, op: str, argval, peek, line: int, offset: int) -> None:
    deleting = op.startswith("DELETE")
    if op.endswith("_ATTR"):
        found.writes[offset] = WriteSite("attr", peek(1), argval, line)
    elif op.endswith("_SUBSCR"):
        target, key = (peek(2), peek(1)) if deleting else (peek(2), peek(1))
        found.writes[offset] = WriteSite("item", target, key[1] if _is_expr(key) and key[0] == "const" else None,
                                         line)
    elif op.endswith("_GLOBAL"):
        found.writes[offset] = WriteSite("global", None, argval, line)
    else:
        found.writes[offset] = WriteSite("deref", None, argval, line)
    if deleting:
        site = found.writes[offset]
        found.writes[offset] = WriteSite("del " + site.op, site.target, site.name, line)


def _callee_and_args(stack: list, nargs: int) -> tuple[tuple | None, tuple]:
    """The callee expression (None when it is not a chain of loads) and the argument slots of a
    call about to run; a method loaded with LOAD_METHOD has its object in the callee's base."""
    below = stack[-(nargs + 2)] if len(stack) >= nargs + 2 else None
    callee = stack[-(nargs + 1)] if below == _NULL else below
    args = tuple(stack[-nargs:]) if nargs and len(stack) >= nargs else ()
    return (callee if _is_expr(callee) else None), args


def _record_call(found: CodeSites, nargs: int, stack: list, line: int, offset: int) -> None:
    """The callee of a call and its arguments, where a chain of loads names the callee;
    `setattr(obj, "name", value)` and `delattr(obj, "name")` are writes, as STORE_ATTR is."""
    callee, args = _callee_and_args(stack, nargs)
    if callee is None:
        return
    below = stack[-(nargs + 2)] if len(stack) >= nargs + 2 else None
    if callee not in (("global", "setattr"), ("global", "delattr")) or nargs < 2 or below != _NULL:
        found.calls[offset] = CallSite(callee, tuple(a if _is_expr(a) else None for a in args))
        return
    target, name = stack[-nargs], stack[-nargs + 1]
    name = name[1] if _is_expr(name) and name[0] == "const" else None
    found.writes[offset] = WriteSite("attr" if callee[1] == "setattr" else "del attr", target, name, line)
