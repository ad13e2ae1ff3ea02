"""muster.train.huggingface.transformers: run a ``transformers.Trainer`` on muster's workers.

Inside ``train_loop_per_worker``::

    trainer = transformers.Trainer(model=model, args=args, train_dataset=ds, ...)
    trainer.add_callback(RayTrainReportCallback())
    trainer = prepare_trainer(trainer)
    ckpt = muster.train.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as folder:
            trainer.train(resume_from_checkpoint=os.path.join(folder, RayTrainReportCallback.CHECKPOINT_NAME))
    else:
        trainer.train()

The Trainer joins the process group muster set up (through Accelerate) and
shards its data itself. Needs ``pip install "muster[transformers]"``.
"""

from muster.train.huggingface.transformers._transformers_utils import (
    MusterTrainReportCallback,
    RayTrainReportCallback,
    prepare_trainer,
)

__all__ = ["MusterTrainReportCallback", "RayTrainReportCallback", "prepare_trainer"]
