"""Real models for the viewer's tests: transformers' BERT and ResNet built from configs with random weights."""
import torch
import transformers as tf

import graphport as gp


def bert_program(layers: int = 12, hidden: int = 64, heads: int = 4):
    """A BERT-base-sized program (12 layers, the graph BERT-base has; narrow by default, so it
    exports in seconds: the graph does not depend on the width)."""
    model = tf.BertModel(tf.BertConfig(vocab_size=1000, num_hidden_layers=layers, hidden_size=hidden,
                                       num_attention_heads=heads, intermediate_size=4 * hidden)).eval()
    ids = torch.randint(0, 1000, (2, 16))
    batch, seq = gp.Dim("batch", min=1, max=64), gp.Dim("seq", min=1, max=512)
    return gp.export(model, (ids,), dynamic_shapes={"input_ids": {0: batch, 1: seq}})


def resnet_model():
    """A ResNet-18-shaped CNN (conv, batch norm, relu, pooling, residual adds)."""
    return tf.ResNetModel(tf.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[2, 2, 2, 2],
                                          layer_type="basic")).eval()


def cnn_program():
    batch = gp.Dim("batch", max=32)
    return gp.export(resnet_model(), (torch.randn(2, 3, 64, 64),), dynamic_shapes={"pixel_values": {0: batch}})
