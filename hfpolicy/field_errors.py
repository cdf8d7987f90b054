"""Config errors that name their fields, so each caller can say them in its own words:

    raise ConfigFieldError(self, "{n_heads} must divide {dim_model}")
    str(error)                  # "n_heads=3 must divide dim_model=256"
    error.flags("policy.")      # "--policy.n_heads=3 must divide --policy.dim_model=256"

`{name=LITERAL}` names a field with a value to try (`set {n_action_steps=1}`); other `{word}`s are keyword arguments.
"""

import ast
import enum
import string
from collections.abc import Callable
from typing import Any


def value_words(value: Any) -> str:
    """A value as the command line writes it: true/false, null, [64,128]."""
    if value is None:
        return "null"
    if value == "":
        return "''"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(value_words(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {value_words(item)}" for key, item in value.items()) + "}"
    return str(value)


def python_words(name: str, value: Any) -> str:
    """`name=value` as Python writes it (strings quoted)."""
    return f"{name}={value!r}" if isinstance(value, str) else f"{name}={value}"


class _FieldFormatter(string.Formatter):
    """Formats `{name}` / `{name=LITERAL}` with `word(name, value)`."""

    def __init__(self, config: Any, word: Callable[[str, Any], str]):
        self.config, self.word = config, word

    def get_field(self, field_name: str, args, kwargs) -> tuple[str, str]:
        if field_name in kwargs:
            return kwargs[field_name], field_name
        name, has_literal, literal = field_name.partition("=")
        value = ast.literal_eval(literal) if has_literal else getattr(self.config, name)
        return self.word(name, value), field_name


class ConfigFieldError(ValueError):
    """A value of `config` that does not fit, with the fields the message is about."""

    def __init__(self, config: Any, template: str, **text: Any):
        self.config, self.template, self.text = config, template, text
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
        self.fields = [name.partition("=")[0] for name in names if name not in text]
        super().__init__(self.render(python_words))

    def render(self, word: Callable[[str, Any], str]) -> str:
        """The message with each field written by `word(name, value)`."""
        return _FieldFormatter(self.config, word).format(self.template, **self.text)

    def flags(self, prefix: str = "", only: set[str] | None = None) -> str:
        """The message with each field (of `only`, when given) as `--<prefix>name=value`."""

        def word(name: str, value: Any) -> str:
            if only is not None and name not in only:
                return python_words(name, value)
            return f"--{prefix}{name}={value_words(value)}"

        return self.render(word)
