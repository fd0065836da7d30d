"""Entry points the CLI tests name as tests.cli.entry:...: small models and their inputs."""
import torch


class TokenModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, ids, x):
        return self.lin(self.emb(ids)) + x[:, :1]


def make_model():
    torch.manual_seed(0)
    return TokenModel()


def inputs():
    torch.manual_seed(1)
    return torch.randint(0, 10, (2, 5)), torch.randn(2, 5, 3)


def model_and_inputs():
    return make_model(), inputs()


class Wrong(torch.nn.Module):
    """Eager differs from what it exports from size 5 on: the checker must say so."""

    def forward(self, x):
        if torch.compiler.is_exporting():
            return x * 2
        return x * 2 if x.shape[0] < 5 else x * 2 + 1


def wrong_inputs():
    return (torch.randn(6, 3),)


def data_dependent():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x
    return Branchy(), (torch.randn(3),)


def broken():
    raise ValueError("the factory failed")


class Square(torch.nn.Module):
    """`x @ x` needs a square x: a dynamic dim 0 is fixed to dim 1's size."""

    def forward(self, x):
        return x @ x


def square_inputs():
    return (torch.randn(4, 4),)


class Fixed(torch.nn.Module):
    """`view(2, 4, 2)` fixes the size of a 1-d input to 16."""

    def forward(self, x):
        return x.view(2, 4, 2)


def fixed_inputs():
    return (torch.randn(16),)


def keyword_model():
    """Called with keywords only, as transformers models are."""
    return make_model(), (), dict(zip(("ids", "x"), inputs()))
