"""Fakes shared by the BLIP units tests (the encoder's and the cross-encoder's): a model output holding
``last_hidden_state``, and a tensor whose ``.to`` calls are recorded."""


class Out:
    def __init__(self, last_hidden_state):
        self.last_hidden_state = last_hidden_state


class Moved:
    """A tensor whose ``.to`` calls are recorded (device and dtype a batch is moved to)."""

    def __init__(self, tensor, log, name):
        self.tensor, self.log, self.name = tensor, log, name

    def to(self, *args, **kwargs):
        self.log.append((self.name, args, kwargs))
        return self.tensor.to(*args, **kwargs)
