import subprocess, resource, json, sys, os, random, statistics as st
# usage: scen_ab.py PAIRS trajectories epochs
P=int(sys.argv[1]); traj=sys.argv[2]; ep=sys.argv[3]
bins={'base':'/work/wt/stepprof-base/build/mixprec','new':'/work/wt/stepprof/build/mixprec'}
res={'base':[], 'new':[]}
env=dict(os.environ, MIXPREC_NUM_THREADS='1')
for i in range(P):
    for v in (('base','new') if i%2==0 else ('new','base')):
        r0=resource.getrusage(resource.RUSAGE_CHILDREN)
        out=subprocess.run(['nice','-n','19',bins[v],'train','--json','--quiet','checkpoint.enabled=false','obs.store.enabled=false',
            'training.precision=mixed_bf16','model.hidden=512','model.depth=3','training.batch_size=256',
            'data.trajectories='+traj,'training.epochs='+ep,'training.precision_fp32_layers=first,last',
            'output.dir=/tmp/sp_scen_%d'%random.randrange(1<<30)],capture_output=True,text=True,env=env)
        r1=resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu=(r1.ru_utime-r0.ru_utime)+(r1.ru_stime-r0.ru_stime)
        d=json.loads(out.stdout)
        res[v].append((cpu,d.get('wall_time_s'),d.get('val_loss'),d.get('final_train_loss')))
        print(v,"cpu %.3f s  wall_time_s %.4f  val_loss %r train_loss %r"%res[v][-1],flush=True)
for v in ('base','new'):
    print(v,"median process CPU %.3f s, median wall_time_s %.4f"%(st.median(x[0] for x in res[v]),st.median(x[1] for x in res[v])))
