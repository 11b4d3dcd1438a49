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
