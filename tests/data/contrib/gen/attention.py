# Generates the synthetic com.microsoft test models of tests/data/contrib (see ../README.md):
# /usr/bin/python3 attention.py writes them into the current folder (Debian's python3-onnx, numpy).
import onnx
from onnx import helper as h, TensorProto as T
def save(name, nodes, ins, outs):
    g=h.make_graph(nodes, 'g', ins, [h.make_tensor_value_info(o, T.FLOAT, None) if isinstance(o,str) else o for o in outs])
    m=h.make_model(g, opset_imports=[h.make_opsetid('',17), h.make_opsetid('com.microsoft',1)]); m.ir_version=8
    onnx.save(m, name+'.onnx')
F=lambda n, s: h.make_tensor_value_info(n, T.FLOAT, s)
I=lambda n, s: h.make_tensor_value_info(n, T.INT32, s)
N=2; H=8; D=N*H
# MHA variants
def mha(name, mask=None, bias=False, ab=False, past=False, uni=0, kv4=False, qk=False, scale=None):
    names=['q','k','v','b' if bias else '', 'm' if mask else '', 'ab' if ab else '', 'pk' if past else '', 'pv' if past else '']
    ins=[F('q',['B','S',D])]
    if kv4: ins += [F('k',['B',N,'L',H]), F('v',['B',N,'L',H])]
    else: ins += [F('k',['B','L',D]), F('v',['B','L',D])]
    if bias: ins.append(F('b',[3*D]))
    if mask: ins.append(I('m', mask))
    if ab: ins.append(F('ab',['B',N,'S','T']))
    if past: ins += [F('pk',['B',N,'P',H]), F('pv',['B',N,'P',H])]
    outs=['o'] + (['pko','pvo'] if past else ([] if not qk else ['','']))+ (['qk'] if qk else [])
    attrs=dict(num_heads=N, unidirectional=uni)
    if scale: attrs['scale']=scale
    save(name, [h.make_node('MultiHeadAttention', names, outs, domain='com.microsoft', **attrs)], ins, [o for o in outs if o])
mha('mha_basic')
mha('mha_bias', bias=True, scale=0.5)
mha('mha_mask1d', mask=['B'])
mha('mha_mask2d', mask=['B','T'])
mha('mha_mask3d', mask=['B','S','T'])
mha('mha_ab', ab=True)
mha('mha_past', past=True, bias=True, mask=['B','T'], uni=1)
mha('mha_uni', uni=1)
mha('mha_kv4', kv4=True)
mha('mha_qk', qk=True, mask=['B','T'])
# Attention variants
def att(name, mask=None, past=False, uni=0, qkv=None, ab=False, Din=12):
    Dq,Dk,Dv = qkv or (D,D,D)
    names=['x','w','b','m' if mask else '', 'past' if past else '', 'ab' if ab else '']
    ins=[F('x',['B','S',Din]), F('w',[Din,Dq+Dk+Dv]), F('b',[Dq+Dk+Dv])]
    if mask: ins.append(I('m', mask))
    if past: ins.append(F('past',[2,'B',N,'P',Dv//N]))
    if ab: ins.append(F('ab',['B',N,'S','T']))
    outs=['o'] + (['present'] if past else [])
    attrs=dict(num_heads=N, unidirectional=uni)
    if qkv: attrs['qkv_hidden_sizes']=list(qkv)
    save(name, [h.make_node('Attention', names, outs, domain='com.microsoft', **attrs)], ins, outs)
att('att_basic')
att('att_mask1d', mask=['B'])
att('att_mask2b', mask=['B2'])
att('att_mask2d', mask=['B','T'])
att('att_mask3d', mask=['B','S','T'])
att('att_past', past=True, uni=1, mask=['B','T'])
att('att_uni', uni=1)
att('att_qkv', qkv=(16,16,8))
att('att_ab', ab=True)
# RotaryEmbedding
def rope(name, shape, pos, attrs, rot2):
    ins=[F('x',shape), h.make_tensor_value_info('pos', T.INT64, pos), F('cos',['M',rot2]), F('sin',['M',rot2])]
    save(name, [h.make_node('RotaryEmbedding', ['x','pos','cos','sin'], ['y'], domain='com.microsoft', **attrs)], ins, ['y'])
rope('rope_3d', ['B','S',32], ['B','S'], {}, 4)
rope('rope_3d_scalar', ['B','S',32], [1], {}, 4)
rope('rope_3d_inter', ['B','S',32], ['B','S'], {'interleaved':1}, 4)
rope('rope_4d', ['B',4,'S',8], ['B','S'], {}, 4)
rope('rope_partial', ['B','S',32], ['B','S'], {'num_heads':4, 'rotary_embedding_dim':4}, 2)
