"""slime.utils.types.Sample: the fields the pre-flight sets and the metrics hook reads."""
from dataclasses import dataclass, field


@dataclass
class Sample:
    prompt: str = ""
    response: str = ""
    label: str | None = None
    metadata: dict = field(default_factory=dict)
    custom_rm_path: str | None = None
    weight_versions: list[str] = field(default_factory=list)
