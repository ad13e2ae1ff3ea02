"""Ray's ``Chain``: several preprocessors applied in order, fitted and used as one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from muster.data.preprocessor import Preprocessor
from muster.data.preprocessors.version_support import SerializablePreprocessor
from muster.exceptions import InvalidTypeError

if TYPE_CHECKING:
    from muster.data.dataset import Dataset


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.chain")
class Chain(Preprocessor):
    """``Chain(a, b, c)``: ``fit`` fits ``a`` on the dataset, ``b`` on ``a``'s output, and so on;
    ``transform`` applies each in turn (one lazy ``map_batches`` per step). ``stats_`` stays empty:
    each step keeps its own."""

    def __init__(self, *preprocessors: Preprocessor):
        super().__init__()
        bad = [p for p in preprocessors if not isinstance(p, Preprocessor)]
        if bad or not preprocessors:
            raise InvalidTypeError(f"Chain({', '.join(map(repr, preprocessors))}): pass one or more preprocessors "
                                   "(muster.data.preprocessors), e.g. "
                                   "Chain(StandardScaler(['x']), Concatenator(['x'])).")
        self._preprocessors = preprocessors

    @property
    def preprocessors(self) -> tuple[Preprocessor, ...]:
        return self._preprocessors

    def fit_status(self) -> Preprocessor.FitStatus:
        statuses = [p.fit_status() for p in self._preprocessors]
        fittable = [s for s in statuses if s != Preprocessor.FitStatus.NOT_FITTABLE]
        if not fittable:
            return Preprocessor.FitStatus.NOT_FITTABLE
        fitted = sum(s == Preprocessor.FitStatus.FITTED for s in fittable)
        if fitted == len(fittable):
            return Preprocessor.FitStatus.FITTED
        return Preprocessor.FitStatus.PARTIALLY_FITTED if fitted else Preprocessor.FitStatus.NOT_FITTED

    def _fit(self, ds: "Dataset") -> Preprocessor:
        for p in self._preprocessors[:-1]:
            ds = p.fit_transform(ds)
        self._preprocessors[-1].fit(ds)
        return self

    def fit_transform(self, ds: "Dataset", *, transform_num_cpus: float | None = None,
                      transform_memory: float | None = None, transform_batch_size: int | None = None,
                      transform_concurrency: int | None = None) -> "Dataset":
        """Each step's ``fit_transform`` on the previous step's output (the options go to every step)."""
        for p in self._preprocessors:
            ds = p.fit_transform(ds, transform_num_cpus=transform_num_cpus, transform_memory=transform_memory,
                                 transform_batch_size=transform_batch_size,
                                 transform_concurrency=transform_concurrency)
        return ds

    def _transform(self, ds: "Dataset", options: dict[str, Any]) -> "Dataset":
        for p in self._preprocessors:
            ds = p.transform(ds, **options)
        return ds

    def _transform_batch(self, data: Any) -> Any:
        for p in self._preprocessors:
            data = p.transform_batch(data)
        return data

    def __repr__(self) -> str:
        return f"Chain({', '.join(repr(p) for p in self._preprocessors)})"


__all__ = ["Chain"]
