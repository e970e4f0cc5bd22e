"""Asking the user to answer an interrupt, from its ``responseSchema`` rather than its ``reason``.

The contract says to drive the UI from the message, the schema and the descriptive metadata, so the choices
offered are read off the schema (an ``enum``, ``oneOf`` branches with a ``const``, a boolean) and titled from
``metadata.standardOptions``; a string branch without a ``const`` means free text is accepted.  Whatever the
user types is validated against the schema before it is sent, so a typo costs a re-ask instead of a failed
resume run.
"""
import json
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Set

import jsonschema
from jsonschema.exceptions import SchemaError, best_match

from iaccode_agui.client.render import Renderer

InputFn = Callable[[str], str]
HEADINGS = {"tool_call": "Permission needed", "input_required": "Your answer is needed"}
EMPTY_MEANS = {"deny": "denies", "cancel": "cancels"}
DETAILS = (("purpose", "why"), ("safeSummary", "call"))    # metadata shown, and its label


class Choice(NamedTuple):
    key: str                 # what the user may type instead of the number (e.g. ``allow_once``)
    title: str
    payload: Dict[str, Any]


class InvalidAnswer(ValueError):
    """The typed answer cannot become a payload the schema accepts; the user is asked again."""


def _titles(metadata: Dict[str, Any]) -> Dict[str, str]:
    titles: Dict[str, str] = {}
    for key, label in (("options", "label"), ("standardOptions", "title")):  # standard titles win
        options = metadata.get(key)
        for option in options if isinstance(options, list) else []:
            if isinstance(option, dict) and option.get("id") is not None and option.get(label):
                titles[str(option["id"])] = str(option[label])
    return titles


def _target_property(schema: Dict[str, Any]) -> Optional[str]:
    """The one property an answer sets: the single required one, else the only one."""
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        return None
    required = schema.get("required")
    named = [key for key in required if key in props] if isinstance(required, list) else []
    if len(named) == 1:
        return named[0]
    return next(iter(props)) if len(props) == 1 else None


class AnswerForm:
    """What can be answered to one interrupt, and how typed text becomes its payload."""

    def __init__(self, interrupt: Dict[str, Any]) -> None:
        self.interrupt = interrupt
        self.interrupt_id = str(interrupt.get("id", ""))
        schema = interrupt.get("responseSchema")
        self.schema: Dict[str, Any] = schema if isinstance(schema, dict) else {}
        metadata = interrupt.get("metadata")
        self.metadata: Dict[str, Any] = metadata if isinstance(metadata, dict) else {}
        self.titles = _titles(self.metadata)
        self.choices: List[Choice] = []
        self.free_text: Optional[str] = None
        self._from_enum: Set[int] = set()      # indexes of choices read from an ``enum``
        self.hidden: List[Choice] = []         # other spellings of a shown choice: accepted, not listed
        self._derive(self.schema)
        self._drop_aliases()
        self._validator: Any = None
        if self.schema:
            validator_class = jsonschema.validators.validator_for(self.schema,
                                                                  default=jsonschema.Draft202012Validator)
            try:
                validator_class.check_schema(self.schema)
                self._validator = validator_class(self.schema)
            except SchemaError:
                self._validator = None  # a schema we cannot read: let the adapter be the judge

    # ---- schema reading -------------------------------------------------------------------------
    def _add(self, prop: str, value: Any, title: Optional[str] = None) -> None:
        key = json.dumps(value) if not isinstance(value, str) else value
        self.choices.append(Choice(key, self.titles.get(key) or title or key, {prop: value}))

    def _derive(self, schema: Dict[str, Any]) -> None:
        branches = schema.get("oneOf", schema.get("anyOf"))
        if isinstance(branches, list):
            for branch in branches:
                if isinstance(branch, dict):
                    self._derive(branch)
            return
        prop = _target_property(schema)
        sub = schema["properties"][prop] if prop is not None else None
        if not isinstance(sub, dict):
            return
        if "const" in sub:
            self._add(prop, sub["const"], sub.get("title"))
        elif isinstance(sub.get("enum"), list):
            for value in sub["enum"]:
                self._add(prop, value)
                self._from_enum.add(len(self.choices) - 1)
        elif sub.get("type") == "boolean":
            self._add(prop, True)
            self._add(prop, False)
        elif sub.get("type") == "string" and self.free_text is None:
            self.free_text = prop

    def _drop_aliases(self) -> None:
        """Show an option once when the schema offers it twice.

        A deployment confirmation accepts an option by its id (``selectedId``) or by its ``action``; both
        name the same choice, so an enum value that an option already offered by id carries is dropped.
        """
        options = self.metadata.get("options")
        offered = {choice.key for choice in self.choices}
        aliases = {(field, value) for option in (options if isinstance(options, list) else [])
                   if isinstance(option, dict) and str(option.get("id")) in offered
                   for field, value in option.items() if field != "id" and isinstance(value, str)}
        kept: List[Choice] = []
        for index, choice in enumerate(self.choices):
            duplicate = index in self._from_enum and next(iter(choice.payload.items())) in aliases
            (self.hidden if duplicate else kept).append(choice)
        self.choices = kept

    # ---- answers --------------------------------------------------------------------------------
    @property
    def empty_means(self) -> str:
        """What an empty answer does: a cancelled permission is a denial, so it is labelled as one."""
        if any(choice.payload == {"decision": "deny"} for choice in self.choices):
            return "deny"
        return "cancel"

    @property
    def prompt(self) -> str:
        """What to type, in words: the choice numbers, free text or a JSON object, and what Enter alone does."""
        parts = []
        if self.choices:
            parts.append("a number 1-%d" % len(self.choices) if len(self.choices) > 1 else "1")
        if self.free_text is not None:
            parts.append("your own answer")
        elif not self.choices:
            parts.append("a JSON object")
        return "Type %s; Enter alone %s: " % (" or ".join(parts), EMPTY_MEANS[self.empty_means])

    def validate(self, payload: Dict[str, Any]) -> None:
        if self._validator is None:
            return
        error = best_match(self._validator.iter_errors(payload))
        if error is not None:
            raise InvalidAnswer(error.message)

    def _is_valid(self, payload: Dict[str, Any]) -> bool:
        try:
            self.validate(payload)
        except InvalidAnswer:
            return False
        return True

    def _pick(self, text: str) -> Dict[str, Any]:
        if text.isdigit() and self.choices:
            number = int(text)
            if 1 <= number <= len(self.choices):
                return dict(self.choices[number - 1].payload)
            if self.free_text is None:
                raise InvalidAnswer("choose a number from 1 to %d" % len(self.choices))
        for choice in self.choices + self.hidden:
            if text.casefold() == choice.key.casefold():
                return dict(choice.payload)
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except ValueError:
                value = None
            # Free text that happens to start with a brace stays free text unless it is a valid answer.
            if isinstance(value, dict) and (self.free_text is None or self._is_valid(value)):
                return value
            if self.free_text is None:
                raise InvalidAnswer("not a JSON object")
        if self.free_text is not None:
            return {self.free_text: text}
        if self.choices:
            raise InvalidAnswer("choose a number from 1 to %d or one of: %s"
                                % (len(self.choices), ", ".join(c.key for c in self.choices)))
        raise InvalidAnswer("type the answer as a JSON object")

    def answer(self, text: str) -> Optional[Dict[str, Any]]:
        """The validated payload for ``text``; None when the user left it empty (cancel)."""
        text = text.strip()
        if not text:
            return None
        payload = self._pick(text)
        self.validate(payload)
        return payload

    def resume_entry(self, payload: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        if payload is None:
            return {"interruptId": self.interrupt_id, "status": "cancelled"}
        return {"interruptId": self.interrupt_id, "status": "resolved", "payload": payload}


def heading(form: AnswerForm) -> str:
    """What is asked, in words: a permission or a question, and what it is about."""
    meta = form.metadata
    title, tool = (str(meta.get(key) or "") for key in ("title", "toolName"))
    about = "%s (%s)" % (title, tool) if title and tool else title or tool
    what = HEADINGS.get(str(form.interrupt.get("reason")), "Input needed")
    return "%s: %s" % (what, about) if about else what


def fields_in_words(schema: Dict[str, Any]) -> str:
    """The fields a JSON answer may carry, for an interrupt that offers neither choices nor free text."""
    props = schema.get("properties")
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    described = []
    for name, sub in (props.items() if isinstance(props, dict) else []):
        kind = sub.get("type", "any value") if isinstance(sub, dict) else "any value"
        described.append("%s (%s%s)" % (name, kind, ", required" if name in required else ""))
    return ", ".join(described)


def show(form: AnswerForm, renderer: Renderer) -> None:
    """Everything the user needs to decide, in words: what is asked, why, and the numbered options."""
    meta = form.metadata
    renderer.line(renderer.glyphs["ask"] + heading(form), "yellow", "bold")
    for text in str(form.interrupt.get("message", "")).splitlines():
        renderer.line("  " + text)
    for key, label in DETAILS:
        if isinstance(meta.get(key), str) and meta[key]:
            renderer.line("  %s: %s" % (label, meta[key]), "dim")
    if form.choices:
        for number, choice in enumerate(form.choices, 1):
            renderer.line("  %d) %s [%s]" % (number, choice.title, choice.key))
    else:
        for title in form.titles.values():
            renderer.line("  - " + title)
    if form.free_text is not None:
        renderer.line("  or type your own answer", "dim")
    elif not form.choices and fields_in_words(form.schema):
        renderer.line("  a JSON object with: " + fields_in_words(form.schema), "dim")
    if form.interrupt.get("expiresAt"):
        renderer.line("  answer before %s" % form.interrupt["expiresAt"], "dim")


def ask(form: AnswerForm, input_fn: InputFn, renderer: Renderer) -> Dict[str, Any]:
    """Show the interrupt and read answers until one is valid; returns its ``resume`` entry.

    EOFError and KeyboardInterrupt from ``input_fn`` propagate: leaving the prompt is the caller's call.
    """
    show(form, renderer)
    while True:
        renderer.end_line()
        text = input_fn(form.prompt)
        try:
            payload = form.answer(text)
        except InvalidAnswer as exc:
            renderer.line("invalid answer: %s" % exc, "red")
            continue
        return form.resume_entry(payload)
