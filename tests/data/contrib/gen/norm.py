# Generates the synthetic com.microsoft test models of tests/data/contrib (see ../README.md):
# /usr/bin/python3 norm.py writes them into the current folder (Debian's python3-onnx, numpy).
import onnx, numpy as np
from onnx import helper as h, TensorProto as T, numpy_helper as nh
def save(name, nodes, ins, outs, inits=[], opset=17):
    g=h.make_graph(nodes, 'g', ins, outs, initializer=inits)
    m=h.make_model(g, opset_imports=[h.make_opsetid('',opset), h.make_opsetid('com.microsoft',1)]); m.ir_version=8
    onnx.save(m, name+'.onnx')
V=h.make_tensor_value_info
r=np.random.RandomState(0)
F=T.FLOAT
g=lambda n: nh.from_array((r.rand(16)+0.5).astype(np.float32), n)
bb=lambda n: nh.from_array((r.randn(16)*0.1).astype(np.float32), n)
save('sln', [h.make_node('SkipLayerNormalization', ['x','s','g','b','bias'], ['y','m','iv','sum'], domain='com.microsoft', epsilon=1e-5)], [V('x',F,['B','S',16]),V('s',F,['B','S',16])], [V('y',F,None),V('sum',F,None)], [g('g'),bb('b'),bb('bias')])
save('sln_bcast', [h.make_node('SkipLayerNormalization', ['x','s','g','b'], ['y'], domain='com.microsoft', epsilon=1e-5)], [V('x',F,['B','S',16]),V('s',F,['S',16])], [V('y',F,None)], [g('g'),bb('b')])
save('ssln', [h.make_node('SkipSimplifiedLayerNormalization', ['x','s','g','bias'], ['y','m','iv','sum'], domain='com.microsoft', epsilon=1e-6)], [V('x',F,['B','S',16]),V('s',F,['B','S',16])], [V('y',F,None),V('sum',F,None)], [g('g'),bb('bias')])
save('simln', [h.make_node('SimplifiedLayerNormalization', ['x','g'], ['y','iv'], epsilon=1e-6, axis=-1)], [V('x',F,['B','S',16])], [V('y',F,None),V('iv',F,None)], [g('g')])
save('simln_ms', [h.make_node('SimplifiedLayerNormalization', ['x','g'], ['y'], domain='com.microsoft', epsilon=1e-6, axis=-1)], [V('x',F,['B','S',16])], [V('y',F,None)], [g('g')])
save('ln11', [h.make_node('LayerNormalization', ['x','g','b'], ['y','m','iv'], epsilon=1e-5, axis=-1)], [V('x',F,['B','S',16])], [V('y',F,None),V('m',F,None),V('iv',F,None)], [g('g'),bb('b')], opset=11)
save('ln14_ax1', [h.make_node('LayerNormalization', ['x','g'], ['y'], epsilon=1e-5, axis=1)], [V('x',F,['B',4,4])], [V('y',F,None)], [nh.from_array((r.rand(4,4)+0.5).astype(np.float32),'g')], opset=14)
save('gelu_ms', [h.make_node('Gelu', ['x'], ['y'], domain='com.microsoft')], [V('x',F,['B',16])], [V('y',F,None)])
save('fastgelu', [h.make_node('FastGelu', ['x'], ['y'], domain='com.microsoft')], [V('x',F,['B',16])], [V('y',F,None)])
save('fastgelu_b', [h.make_node('FastGelu', ['x','b'], ['y'], domain='com.microsoft')], [V('x',F,['B',16])], [V('y',F,None)], [bb('b')])
save('biasgelu', [h.make_node('BiasGelu', ['x','b'], ['y'], domain='com.microsoft')], [V('x',F,['B',16])], [V('y',F,None)], [bb('b')])
save('quickgelu', [h.make_node('QuickGelu', ['x'], ['y'], domain='com.microsoft', alpha=1.5)], [V('x',F,['B',16])], [V('y',F,None)])
save('biasadd', [h.make_node('BiasAdd', ['x','b','s'], ['y'], domain='com.microsoft')], [V('x',F,['B','S',16]),V('s',F,['B','S',16])], [V('y',F,None)], [bb('b')])
save('biassplitgelu', [h.make_node('BiasSplitGelu', ['x','b'], ['y'], domain='com.microsoft')], [V('x',F,['B','S',16])], [V('y',F,None)], [bb('b')])
we=nh.from_array(r.randn(10,16).astype(np.float32),'we'); pe=nh.from_array(r.randn(8,16).astype(np.float32),'pe'); se=nh.from_array(r.randn(2,16).astype(np.float32),'se')
I=T.INT32
save('embln', [h.make_node('EmbedLayerNormalization', ['ids','seg','we','pe','se','g','b','mask'], ['y','mi','esum'], domain='com.microsoft', epsilon=1e-12)], [V('ids',I,['B','S']),V('seg',I,['B','S']),V('mask',I,['B','S'])], [V('y',F,None),V('mi',I,None),V('esum',F,None)], [we,pe,se,g('g'),bb('b')])
save('embln_pos', [h.make_node('EmbedLayerNormalization', ['ids','','we','pe','','g','b','','pos'], ['y','mi'], domain='com.microsoft', epsilon=1e-5)], [V('ids',I,['B','S']),V('pos',I,['B','S'])], [V('y',F,None),V('mi',I,None)], [we,pe,g('g'),bb('b')])
