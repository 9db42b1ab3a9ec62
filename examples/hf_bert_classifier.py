"""A Hugging Face BERT sequence classifier trained from a DataLoader, as a training script holds it.

A tiny ``BertForSequenceClassification`` (2 layers, 64 wide, vocabulary 128; built from a config,
nothing downloaded) tells three kinds of token sequence apart: each class draws its tokens from its
own third of the vocabulary more often than from the others. Batches are dicts of ``input_ids``,
``attention_mask`` and ``labels``, so ``model(**batch).loss`` is the loss. Dropout stays at Hugging
Face's default 0.1; the trainer seeds it per step, the same in every trial.

Its attention's key bias has a gradient that is zero by construction (softmax ignores a constant
added to every key score): in fp32 it is rounding noise, tens of octaves below every other gradient,
which a diagnosis must not read as gradients that need a larger scale.

Run it::

    python -m search.diagnose --task examples.hf_bert_classifier:build
    python -m search.optimize --task examples.hf_bert_classifier:build --trials 20
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader
from transformers import BertConfig, BertForSequenceClassification

from search.tasks import LoaderProblem

VOCAB, CLASSES, LENGTH = 128, 3, 16


def _examples(seed: int, count: int) -> list[dict[str, torch.Tensor]]:
    """``count`` sequences of ``LENGTH`` tokens and their class; 60% of the tokens come from its third."""
    generator = torch.Generator().manual_seed(seed)
    third = (VOCAB - 1) // CLASSES
    out = []
    for _ in range(count):
        label = int(torch.randint(0, CLASSES, (1,), generator=generator))
        anywhere = torch.randint(1, VOCAB, (LENGTH,), generator=generator)
        own = 1 + label * third + torch.randint(0, third, (LENGTH,), generator=generator)
        tokens = torch.where(torch.rand(LENGTH, generator=generator) < 0.6, own, anywhere)
        out.append({"input_ids": tokens, "label": torch.tensor(label)})
    return out


def collate(examples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """A batch as a Hugging Face model takes it: input_ids, attention_mask and labels."""
    input_ids = torch.stack([e["input_ids"] for e in examples])
    return {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "labels": torch.stack([e["label"] for e in examples]),
    }


def build(seed: int) -> LoaderProblem:
    torch.manual_seed(seed)  # The initial weights.
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=LENGTH,
        num_labels=CLASSES,
    )
    model = BertForSequenceClassification(config)
    examples = _examples(seed, 640)  # 512 to train on, 128 held out.
    train = DataLoader(examples[:512], batch_size=32, shuffle=True, collate_fn=collate)
    valid = DataLoader(examples[512:], batch_size=64, collate_fn=collate)
    return LoaderProblem(
        model=model,
        train_batches=train,
        make_optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3),
        steps=40,
        eval_batches=valid,
        seed=seed,
    )
