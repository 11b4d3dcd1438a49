# Generates the synthetic com.microsoft test models of tests/data/contrib (see ../README.md):
# /usr/bin/python3 gqa.py writes them into the current folder (Debian's python3-onnx, numpy).
import onnx, sys
from onnx import helper as h, TensorProto as T
def gqa(name, packed=False, rotary=False, attrs={}, extra_inputs=(), qk=False, dt=T.FLOAT, N=4, NKV=2, H=16, rotdim=None):
    D=N*H; DKV=NKV*H
    ins=[]; names=[]
    if packed:
        ins.append(h.make_tensor_value_info('query', dt, ['B','S',D+2*DKV])); names += ['query','','']
    else:
        ins += [h.make_tensor_value_info('query', dt, ['B','S',D]), h.make_tensor_value_info('key', dt, ['B','S',DKV]), h.make_tensor_value_info('value', dt, ['B','S',DKV])]
        names += ['query','key','value']
    ins += [h.make_tensor_value_info('past_key', dt, ['B',NKV,'P',H]), h.make_tensor_value_info('past_value', dt, ['B',NKV,'P',H]),
            h.make_tensor_value_info('seqlens_k', T.INT32, ['B']), h.make_tensor_value_info('total_sequence_length', T.INT32, [])]
    names += ['past_key','past_value','seqlens_k','total_sequence_length']
    if rotary:
        r = rotdim or H
        ins += [h.make_tensor_value_info('cos_cache', dt, ['M', r//2]), h.make_tensor_value_info('sin_cache', dt, ['M', r//2])]
        names += ['cos_cache','sin_cache']
    else:
        names += ['','']
    for e in extra_inputs:
        if e=='position_ids': ins.append(h.make_tensor_value_info('position_ids', T.INT64, ['B','S'])); names.append('position_ids')
        elif e=='attention_bias': ins.append(h.make_tensor_value_info('attention_bias', dt, ['B',N,'S','T'])); names.append('attention_bias')
        elif e=='head_sink': ins.append(h.make_tensor_value_info('head_sink', dt, [N])); names.append('head_sink')
        else: names.append('')
    outs=['output','present_key','present_value'] + (['output_qk'] if qk else [])
    node=h.make_node('GroupQueryAttention', names, outs, domain='com.microsoft', num_heads=N, kv_num_heads=NKV, do_rotary=int(rotary), **attrs)
    vo=[h.make_tensor_value_info(o, dt, None) for o in outs]
    g=h.make_graph([node], 'g', ins, vo)
    m=h.make_model(g, opset_imports=[h.make_opsetid('',17), h.make_opsetid('com.microsoft',1)])
    m.ir_version=8
    onnx.save(m, name+'.onnx')
gqa('gqa_basic')
gqa('gqa_packed', packed=True)
gqa('gqa_rotary', rotary=True)
gqa('gqa_rotary_inter', rotary=True, attrs={'rotary_interleaved':1})
gqa('gqa_rotary_half', rotary=True, rotdim=16, H=32)
gqa('gqa_window', attrs={'local_window_size':3})
gqa('gqa_softcap', attrs={'softcap':2.0, 'scale':0.3})
gqa('gqa_smooth', attrs={'smooth_softmax':1})
gqa('gqa_sink', extra_inputs=('','','head_sink'))
gqa('gqa_bias', extra_inputs=('','attention_bias'))
gqa('gqa_posids', rotary=True, extra_inputs=('position_ids',))
gqa('gqa_qk1', attrs={'qk_output':1}, qk=True)
gqa('gqa_qk2', attrs={'qk_output':2}, qk=True)
gqa('gqa_fp16', dt=T.FLOAT16, rotary=True)
