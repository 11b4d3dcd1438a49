# Generates the synthetic com.microsoft test models of tests/data/contrib (see ../README.md):
# /usr/bin/python3 quant.py writes them into the current folder (Debian's python3-onnx, numpy).
import onnx, numpy as np
from onnx import helper as h, TensorProto as T, numpy_helper as nh
def save(name, nodes, ins, outs, inits=[]):
    g=h.make_graph(nodes, 'g', ins, outs, initializer=inits)
    m=h.make_model(g, opset_imports=[h.make_opsetid('',17), h.make_opsetid('com.microsoft',1)]); m.ir_version=8
    onnx.save(m, name+'.onnx')
V=h.make_tensor_value_info
r=np.random.RandomState(0)
# DynamicQuantizeMatMul
for bt,name in [(np.int8,'s8'),(np.uint8,'u8')]:
  for bias in [0,1]:
    B=r.randint(-64 if bt==np.int8 else 0, 64 if bt==np.int8 else 256, size=(16,8)).astype(bt)
    inits=[nh.from_array(B,'B'), nh.from_array(r.rand(8).astype(np.float32)*0.1,'bs'), nh.from_array(r.randint(-3 if bt==np.int8 else 120,3 if bt==np.int8 else 130,size=8).astype(bt),'bz')]
    ins=['A','B','bs','bz']
    if bias: inits.append(nh.from_array(r.randn(8).astype(np.float32),'bias')); ins.append('bias')
    save(f'dqmm_{name}_{bias}', [h.make_node('DynamicQuantizeMatMul', ins, ['Y'], domain='com.microsoft')], [V('A',T.FLOAT,['M',16])], [V('Y',T.FLOAT,None)], inits)
# MatMulIntegerToFloat
for at,bt,name in [(np.uint8,np.int8,'u8s8'),(np.int8,np.int8,'s8s8'),(np.uint8,np.uint8,'u8u8')]:
    tt={np.uint8:T.UINT8,np.int8:T.INT8}
    B=r.randint(-64 if bt==np.int8 else 0, 64 if bt==np.int8 else 256, size=(16,8)).astype(bt)
    inits=[nh.from_array(B,'B'), nh.from_array(np.array(0.05,np.float32),'as'), nh.from_array(r.rand(8).astype(np.float32)*0.1,'bs'),
           nh.from_array(np.array(3 if at==np.uint8 else -2, at),'az'), nh.from_array(r.randint(0,5,size=8).astype(bt),'bz'), nh.from_array(r.randn(8).astype(np.float32),'bias')]
    save(f'mmitf_{name}', [h.make_node('MatMulIntegerToFloat', ['A','B','as','bs','az','bz','bias'], ['Y'], domain='com.microsoft')], [V('A',tt[at],['M',16])], [V('Y',T.FLOAT,None)], inits)
# MatMulBnb4
for qt in [0,1]:
  for tb in [1,0]:
    N,K,bs=8,32,16
    Bq=r.randint(0,256,size=(N*K+1)//2).astype(np.uint8)
    absmax=(r.rand((N*K+bs-1)//bs)+0.5).astype(np.float32)
    inits=[nh.from_array(Bq,'B'), nh.from_array(absmax,'absmax')]
    save(f'bnb4_q{qt}_t{tb}', [h.make_node('MatMulBnb4', ['A','B','absmax'], ['Y'], domain='com.microsoft', K=K, N=N, block_size=bs, quant_type=qt, transB=tb)], [V('A',T.FLOAT,['M',K if tb else N])], [V('Y',T.FLOAT,None)], inits)
# ms Quantize/Dequantize
for zt,zn in [(np.uint8,'u8'),(np.int8,'s8'),(np.int16,'s16'),(np.uint16,'u16')]:
    tt={np.uint8:T.UINT8,np.int8:T.INT8,np.int16:T.INT16,np.uint16:T.UINT16}[zt]
    inits=[nh.from_array(np.array(0.02,np.float32),'s'), nh.from_array(np.array(3,zt),'z')]
    save(f'msq_{zn}', [h.make_node('QuantizeLinear', ['x','s','z'], ['y'], domain='com.microsoft')], [V('x',T.FLOAT,['N',4])], [V('y',tt,None)], inits)
    save(f'msdq_{zn}', [h.make_node('DequantizeLinear', ['x','s','z'], ['y'], domain='com.microsoft')], [V('x',tt,['N',4])], [V('y',T.FLOAT,None)], inits)
inits=[nh.from_array(np.array([0.02,0.05,0.1,0.01],np.float32),'s'), nh.from_array(np.array([3,0,100,255],np.uint8),'z')]
save('msq_axis', [h.make_node('QuantizeLinear', ['x','s','z'], ['y'], domain='com.microsoft', axis=1)], [V('x',T.FLOAT,['N',4,3])], [V('y',T.UINT8,None)], inits)
save('msdq_axis', [h.make_node('DequantizeLinear', ['x','s','z'], ['y'], domain='com.microsoft', axis=1)], [V('x',T.UINT8,['N',4,3])], [V('y',T.FLOAT,None)], inits)
# QLinear ops
for dt,dn in [(np.uint8,'u8'),(np.int8,'s8')]:
    tt={np.uint8:T.UINT8,np.int8:T.INT8}[dt]
    z=lambda v: np.array(v if dt==np.uint8 else v-128, dt)
    ini=lambda: [nh.from_array(np.array(0.03,np.float32),'as'), nh.from_array(z(120),'az'), nh.from_array(np.array(0.05,np.float32),'bs'), nh.from_array(z(130),'bz'), nh.from_array(np.array(0.07,np.float32),'cs'), nh.from_array(z(128),'cz')]
    for op in ['QLinearAdd','QLinearMul']:
        save(f'{op}_{dn}', [h.make_node(op, ['a','as','az','b','bs','bz','cs','cz'], ['c'], domain='com.microsoft')], [V('a',tt,['N',3,4]), V('b',tt,[4])], [V('c',tt,None)], ini())
    inits=[nh.from_array(np.array(0.02,np.float32),'xs'), nh.from_array(z(110),'xz'), nh.from_array(np.array(1/256,np.float32),'ys'), nh.from_array(z(0),'yz')]
    save(f'QLinearSigmoid_{dn}', [h.make_node('QLinearSigmoid', ['x','xs','xz','ys','yz'], ['y'], domain='com.microsoft')], [V('x',tt,['N',64])], [V('y',tt,None)], inits)
    inits2=[nh.from_array(np.array(0.02,np.float32),'xs'), nh.from_array(z(110),'xz'), nh.from_array(np.array(0.03,np.float32),'ys'), nh.from_array(z(100),'yz')]
    save(f'QLinearLeakyRelu_{dn}', [h.make_node('QLinearLeakyRelu', ['x','xs','xz','ys','yz'], ['y'], domain='com.microsoft', alpha=0.1)], [V('x',tt,['N',64])], [V('y',tt,None)], inits2)
    save(f'QLinearGAP_{dn}', [h.make_node('QLinearGlobalAveragePool', ['x','xs','xz','ys','yz'], ['y'], domain='com.microsoft')], [V('x',tt,['N',3,5,5])], [V('y',tt,None)], inits2)
    save(f'QLinearGAPnhwc_{dn}', [h.make_node('QLinearGlobalAveragePool', ['x','xs','xz','ys','yz'], ['y'], domain='com.microsoft', channels_last=1)], [V('x',tt,['N',5,5,3])], [V('y',tt,None)], inits2)
    save(f'QLinearAP_{dn}', [h.make_node('QLinearAveragePool', ['x','xs','xz','ys','yz'], ['y'], domain='com.microsoft', kernel_shape=[3,3], strides=[2,2], pads=[1,1,1,1])], [V('x',tt,['N',3,7,7])], [V('y',tt,None)], inits2)
    save(f'QLinearAPnhwc_{dn}', [h.make_node('QLinearAveragePool', ['x','xs','xz','ys','yz'], ['y'], domain='com.microsoft', kernel_shape=[3,3], count_include_pad=1, pads=[1,1,1,1], channels_last=1)], [V('x',tt,['N',7,7,3])], [V('y',tt,None)], inits2)
    for op_set in [12,13]:
        inits3=[nh.from_array(np.array(0.1,np.float32),'xs'), nh.from_array(z(110),'xz'), nh.from_array(np.array(1/256,np.float32),'ys'), nh.from_array(z(0),'yz')]
        save(f'QLinearSoftmax{op_set}_{dn}', [h.make_node('QLinearSoftmax', ['x','xs','xz','ys','yz'], ['y'], domain='com.microsoft', opset=op_set, axis=1 if op_set==12 else -1)], [V('x',tt,[2,3,10])], [V('y',tt,None)], inits3)
    inits4=[nh.from_array(np.array(0.05,np.float32),'ys'), nh.from_array(z(128),'yz'), nh.from_array(np.array(0.03,np.float32),'s1'), nh.from_array(z(120),'z1'), nh.from_array(np.array(0.08,np.float32),'s2'), nh.from_array(z(140),'z2')]
    save(f'QLinearConcat_{dn}', [h.make_node('QLinearConcat', ['ys','yz','x1','s1','z1','x2','s2','z2'], ['y'], domain='com.microsoft', axis=1)], [V('x1',tt,['N',2,4]), V('x2',tt,['N',3,4])], [V('y',tt,None)], inits4)
