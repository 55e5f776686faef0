"""What to train when a model's check finds it weak: its own recipe trained longer, every setting filled in.

The advice a check gives (a weak generator, a classifier near chance) names a command that runs as written (no
placeholders), and the dashboard's fix button trains the same :class:`~probe_core.models.ModelSpec`, so both make
the same model id. Longer training is the one change that helped every generator recipe measured here (the notes
at :data:`~probe_core.models.recipes.REAL_SIZE_STEPS`: on the 32x32 SVHN-like stand-in the real-size VAE's
reconstructions kept the class of 0.62x as many held-out images after 2,400 steps, 0.78x after 5,000 and 0.82x
after 7,500; at 64x64, 0.20x after 2,400 steps and 0.40x after 4,900). Whether the longer-trained model passes is
for its own check to say: the advice promises a better-trained model, not an 'ok'.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from probe_core.models.spec import KINDS, MODEL_FILE_ARCHITECTURE, MODEL_RANGES, PLUGIN_ARCHITECTURE, ModelSpec

# Models whose module the tool did not build: it has no recipe to train longer.
FOREIGN_ARCHITECTURES = (PLUGIN_ARCHITECTURE, MODEL_FILE_ARCHITECTURE)
# Each fix trains this many times as many epochs as the weak model had (the time estimate scales the same way).
LONGER_TRAINING_FACTOR = 2


@dataclass(frozen=True)
class TrainingRemedy:
    """A weak model's recipe trained longer.

    Attributes
    ----------
    weak_model : str
        The id of the model found weak.
    spec : ModelSpec
        What to train: the weak model's data set, kind, classes, seed, latent size and β (generators) or
        always-ambiguous variant (classifiers), with :data:`LONGER_TRAINING_FACTOR` times its epochs; the rest
        comes from the data's recipe, as for ``probe models train``.
    epochs_before : int
    estimated_seconds : float or None
        The weak model's own training time on the machine that trained it, scaled by the epochs; None when
        it was not recorded.
    class_names : tuple of str
        The names of :attr:`spec` ``.classes`` for the command line (empty: all classes).
    """

    weak_model: str
    spec: ModelSpec
    epochs_before: int
    estimated_seconds: float | None
    class_names: tuple[str, ...] = ()

    @property
    def command(self) -> str:
        """The ``probe models train`` line that trains :attr:`spec`."""
        spec = self.spec
        parts = ["probe", "models", "train", "--dataset", shlex.quote(spec.dataset), "--kind", spec.kind,
                 "--epochs", str(spec.epochs)]
        if self.class_names:
            parts += ["--classes", shlex.quote(",".join(self.class_names))]
        if spec.ambiguous:
            parts.append("--ambiguous")
        if spec.latent_dim is not None:
            parts += ["--latent-dim", str(spec.latent_dim)]
        if spec.kl_warmup is not None:
            parts += ["--kl-warmup", str(spec.kl_warmup)]
        if spec.beta is not None:
            parts += ["--beta", f"{spec.beta:g}"]
        parts += ["--seed", str(spec.seed)]
        return " ".join(parts)

    @property
    def time_words(self) -> str:
        """``about 12 min`` (from the weak model's own training time), or ``time not known``."""
        if self.estimated_seconds is None:
            return "time not known"
        seconds = self.estimated_seconds
        return f"about {round(seconds / 60)} min" if seconds >= 60 else f"about {max(1, round(seconds))} s"

    @property
    def description(self) -> str:
        """The change in words, for the warning and the button."""
        return (f"train it {LONGER_TRAINING_FACTOR}x as long ({self.spec.epochs} epochs instead of "
                f"{self.epochs_before}; {self.time_words})")

    def to_dict(self) -> dict:
        return {"weak_model": self.weak_model, "command": self.command, "epochs": self.spec.epochs,
                "epochs_before": self.epochs_before, "estimated_seconds": self.estimated_seconds}


def longer_training(model_id: str, record: dict | None) -> TrainingRemedy | None:
    """The longer-trained recipe of a stored model, or None for one the tool did not train.

    Parameters
    ----------
    model_id : str
        The weak model's id.
    record : dict or None
        Its stored record (``Store.get_model``, ``LoadedModel.record``): ``kind``, ``spec`` and ``metrics``. A
        plugin's or a model file's model (or a finetuned copy of one), an in-memory one or one already at the
        largest number of epochs has no remedy here (None).
    """
    record = record or {}
    spec = record.get("spec") or {}
    architecture = spec.get("architecture")
    foreign = isinstance(architecture, dict) and architecture.get("class") in FOREIGN_ARCHITECTURES
    finetuned = "parent" in spec  # a Defuse correction: retraining its recipe would throw the fix away
    if record.get("kind") not in KINDS or not spec.get("epochs") or not spec.get("dataset") or foreign or finetuned:
        return None
    epochs_before = int(spec["epochs"])
    epochs = epochs_before * LONGER_TRAINING_FACTOR
    if epochs > MODEL_RANGES["epochs"][1]:
        return None
    classes = spec.get("classes")
    longer = ModelSpec(dataset=spec["dataset"], kind=record["kind"], classes=tuple(classes) if classes else None,
                       ambiguous=bool(spec.get("ambiguous")), latent_dim=spec.get("latent_dim"), epochs=epochs,
                       seed=spec.get("seed"), kl_warmup=epochs // 2 if record["kind"] == "vae" else None,
                       beta=spec.get("beta"))
    seconds = (record.get("metrics") or {}).get("train_seconds")
    # a subset model's stored class names are its classes' names, in the order of its class indices
    names = tuple(spec.get("class_names") or ()) if classes else ()
    return TrainingRemedy(model_id, longer, epochs_before,
                          None if seconds is None else round(float(seconds) * epochs / epochs_before, 2),
                          names if len(names) == len(classes or ()) else tuple(map(str, classes or ())))
