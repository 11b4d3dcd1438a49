# Generates the synthetic com.microsoft test models of tests/data/contrib (see ../README.md):
# /usr/bin/python3 search.py writes them into the current folder (Debian's python3-onnx, numpy).
import onnx, numpy as np
from onnx import helper as h, TensorProto as T, numpy_helper as nh
r=np.random.RandomState(0)
V,H,N,P=64,8,2,32
Hd=H//N
def decoder(name):
    inits=[nh.from_array(r.randn(V,H).astype(np.float32),'wte'), nh.from_array((r.randn(P,H)*0.5).astype(np.float32),'wpe'),
           nh.from_array((r.randn(H,3*H)*0.5).astype(np.float32),'wqkv'), nh.from_array((r.randn(3*H)*0.1).astype(np.float32),'bqkv'),
           nh.from_array((r.randn(H,V)*0.7).astype(np.float32),'wout')]
    nodes=[h.make_node('Gather',['wte','input_ids'],['te']), h.make_node('Gather',['wpe','position_ids'],['pe']), h.make_node('Add',['te','pe'],['x']),
           h.make_node('Attention',['x','wqkv','bqkv','attention_mask','past_0'],['a','present_0'],domain='com.microsoft',num_heads=N,unidirectional=1),
           h.make_node('Add',['a','x'],['y']), h.make_node('MatMul',['y','wout'],['logits'])]
    ins=[h.make_tensor_value_info('input_ids',T.INT32,['b','s']), h.make_tensor_value_info('position_ids',T.INT32,['b','s']),
         h.make_tensor_value_info('attention_mask',T.INT32,['b','t']), h.make_tensor_value_info('past_0',T.FLOAT,[2,'b',N,'p',Hd])]
    outs=[h.make_tensor_value_info('logits',T.FLOAT,['b','s',V]), h.make_tensor_value_info('present_0',T.FLOAT,[2,'b',N,'t',Hd])]
    return h.make_graph(nodes, name, ins, outs, initializer=inits)
def model(fname, op, inputs, ins, outs, **attrs):
    n=h.make_node(op, inputs, [o.name for o in outs], domain='com.microsoft', eos_token_id=3, pad_token_id=1, model_type=0, decoder=decoder('dec'), **attrs)
    m=h.make_model(h.make_graph([n],'g',ins,outs), opset_imports=[h.make_opsetid('',17), h.make_opsetid('com.microsoft',1)]); m.ir_version=8
    onnx.save(m, fname)
I=lambda n,s: h.make_tensor_value_info(n,T.INT32,s)
F=lambda n,s: h.make_tensor_value_info(n,T.FLOAT,s)
model('beam.onnx','BeamSearch',['input_ids','max_length','min_length','num_beams','num_return_sequences','length_penalty','repetition_penalty','vocab_mask'],
      [I('input_ids',['B','S']),I('max_length',[1]),I('min_length',[1]),I('num_beams',[1]),I('num_return_sequences',[1]),F('length_penalty',[1]),F('repetition_penalty',[1]),I('vocab_mask',[V])],
      [I('sequences',None),F('sequences_scores',None),F('scores',None)], early_stopping=0, no_repeat_ngram_size=0)
model('greedy.onnx','GreedySearch',['input_ids','max_length','min_length','repetition_penalty'],
      [I('input_ids',['B','S']),I('max_length',[1]),I('min_length',[1]),F('repetition_penalty',[1])],
      [I('sequences',None)], no_repeat_ngram_size=2, init_decoder=decoder('init'))
# Sampling: the decoder above, and one whose logits are a table row per position (so that
# a numpy reference can follow every draw, ../sampling_table/make_reference.py).
S_IN=[I('input_ids',['B','S']),I('max_length',[1]),I('min_length',[1]),F('repetition_penalty',[1]),I('vocab_mask',[V]),
      I('prefix_vocab_mask',['B',V]),I('attention_mask',['B','S']),I('presence_mask',['B',V]),I('seed',[1])]
S_NAMES=[v.name for v in S_IN]
def sampling(fname, used, outs, **attrs):
    ins=[v for v in S_IN if v.name in used]
    model(fname,'Sampling',[n if n in used else '' for n in S_NAMES[:max(S_NAMES.index(u) for u in used)+1]],ins,outs,**attrs)
sampling('sampling_top_p.onnx',['input_ids','max_length','min_length','repetition_penalty','vocab_mask','prefix_vocab_mask','attention_mask','seed'],
         [I('sequences',None)], temperature=0.7, top_p=0.8, min_tokens_to_keep=2, no_repeat_ngram_size=0, init_decoder=decoder('init'))
sampling('sampling_custom.onnx',['input_ids','max_length','seed'],[I('sequences',None)], custom=1, temperature=1.3, top_p=0.6)
sampling('sampling_unfiltered.onnx',['input_ids','max_length','min_length'],[I('sequences',None)], top_p=1.0, temperature=2.5)
def table_decoder():
    # logits (b, s, V) = table[position_ids]; the past (2, b, 1, p, 1) grows by zeros.
    inits=[nh.from_array((r.randn(P,V)*1.5).astype(np.float32),'table'), nh.from_array(np.zeros((),np.float32),'zero')]
    nodes=[h.make_node('Gather',['table','position_ids'],['logits']), h.make_node('Cast',['input_ids'],['idf'],to=T.FLOAT),
           h.make_node('Mul',['idf','zero'],['z']), h.make_node('Unsqueeze',['z'],['z4'],axes=[0,2]),
           h.make_node('Concat',['z4','z4'],['z5'],axis=0), h.make_node('Unsqueeze',['z5'],['z6'],axes=[4]),
           h.make_node('Concat',['past_0','z6'],['present_0'],axis=3)]
    ins=[h.make_tensor_value_info('input_ids',T.INT32,['b','s']), h.make_tensor_value_info('position_ids',T.INT32,['b','s']),
         h.make_tensor_value_info('attention_mask',T.INT32,['b','t']), h.make_tensor_value_info('past_0',T.FLOAT,[2,'b',1,'p',1])]
    outs=[h.make_tensor_value_info('logits',T.FLOAT,['b','s',V]), h.make_tensor_value_info('present_0',T.FLOAT,[2,'b',1,'t',1])]
    return h.make_graph(nodes,'table',ins,outs,initializer=inits)
n=h.make_node('Sampling',S_NAMES,['sequences','filtered_logits'],domain='com.microsoft',eos_token_id=3,pad_token_id=1,model_type=0,
              decoder=table_decoder(),temperature=0.8,top_p=0.9,min_tokens_to_keep=1,presence_penalty=2.5,no_repeat_ngram_size=2)
m=h.make_model(h.make_graph([n],'g',S_IN,[I('sequences',None),F('filtered_logits',None)]),opset_imports=[h.make_opsetid('',11),h.make_opsetid('com.microsoft',1)]); m.ir_version=8
onnx.save(m,'sampling_table.onnx')
