import numpy as np, ctypes as C
lib = C.CDLL("libspeexdsp.so.1")
lib.speex_echo_state_init.restype = C.c_void_p
lib.speex_echo_state_init.argtypes = [C.c_int, C.c_int]
lib.speex_echo_cancellation.argtypes = [C.c_void_p, C.c_void_p, C.c_void_p, C.c_void_p]
lib.speex_echo_ctl.argtypes = [C.c_void_p, C.c_int, C.c_void_p]
lib.speex_echo_state_destroy.argtypes = [C.c_void_p]

def speech(seconds, fs, seed, dbfs):
    rng = np.random.default_rng(seed)
    n = int(seconds*fs); out = np.zeros(n)
    i = int(rng.random()*0.1*fs)
    while i < n:
        L = int((0.12+0.2*rng.random())*fs); voiced = rng.random() > 0.2
        f0 = 100+120*rng.random(); f1 = 300+500*rng.random(); f2 = 900+1300*rng.random(); f3 = 2500+1000*rng.random()
        def co(f, bw):
            r = np.exp(-np.pi*bw/fs); return 2*r*np.cos(2*np.pi*f/fs), r*r
        a1,b1 = co(f1 if voiced else f3, 90 if voiced else 400); a2,b2 = co(f2,120)
        y1=y2=z1=z2=0.0; ph=0.0
        L = min(L, n-i)
        t = np.arange(L)/max(L,1); env = 0.5-0.5*np.cos(2*np.pi*t)
        if voiced:
            f = f0*(1.1-0.2*t); phs = np.cumsum(f/fs); x = np.diff(np.floor(phs), prepend=0.0) + 0.02*rng.standard_normal(L)
        else:
            x = 0.3*rng.standard_normal(L)
        from scipy.signal import lfilter
        y = lfilter([1],[1,-a1,b1],x); z = lfilter([1],[1,-a2,b2],y)
        out[i:i+L] = env*(z if voiced else y)
        i += L + int((0.04+0.21*rng.random())*fs)
    act = out[out!=0]; rms = np.sqrt(np.mean(act**2))
    return out * (32768*10**(dbfs/20)/rms)

def room(rt60, delay, gaindb, fs, seed):
    rng = np.random.default_rng(seed)
    d = int(delay*fs); end = int(rt60*fs)
    h = np.zeros(d+end+1); h[d] = 1
    t = 0.003*fs; sp = fs/1000
    while int(t) < end:
        k = int(t+sp*rng.random()); env = 0.7*np.exp(-6.907755*k/(rt60*fs))
        h[d+k] += -env if rng.random()<0.5 else env; t += sp
    return h*10**(gaindb/20)/np.sqrt(np.sum(h**2))

def drift(x, ppm):
    from scipy.interpolate import interp1d
    r = 1+ppm*1e-6; n = np.arange(len(x))*r
    # band-limited-ish: use cubic interpolation (fine for test)
    return np.interp(n, np.arange(len(x)), x) if False else _sinc(x, n)
def _sinc(x, t):
    half=16; base=np.floor(t).astype(int); frac=t-base; y=np.zeros(len(t))
    for k in range(-half+1, half+1):
        j=base+k; ok=(j>=0)&(j<len(x)); u=k-frac
        s=np.sinc(u)*(0.5+0.5*np.cos(np.pi*u/half))
        y[ok]+= x[j[ok]]*s[ok]
    return y

def scenario(fs=16000, seconds=16, near_start=12, rt60=0.2, delay=0.12, gaindb=-6, far=-20, nearDb=-26, noise=-70, ppm=0, seed=1):
    f = speech(seconds, fs, seed*7+1, far)
    ne = np.zeros(len(f)); nn = speech(seconds-near_start, fs, seed*7+2, nearDb); ne[int(near_start*fs):int(near_start*fs)+len(nn)] = nn[:len(f)-int(near_start*fs)]
    played = f if ppm == 0 else drift(f, ppm)
    echo = np.convolve(played, room(rt60, delay, gaindb, fs, seed*7+3))[:len(f)]
    nz = np.random.default_rng(seed*7+4).standard_normal(len(f))*32768*10**(noise/20)
    q = lambda v: np.clip(np.round(v), -32768, 32767).astype(np.int16)
    return dict(ref=q(f), mic=q(echo+ne+nz), clean=q(ne+nz), near=q(ne), echo=q(echo), fs=fs, near_start=near_start)

def erle(mic, out, a, b):
    return 10*np.log10(np.sum(mic[a:b].astype(float)**2)/max(np.sum(out[a:b].astype(float)**2),1e-9))

def convergence(s, out, target=20):
    fs=s['fs']; w=fs//2; hop=fs//10; end=int(s['near_start']*fs); echo=s['echo'].astype(float)
    loud = max(np.sum(echo[i:i+w]**2) for i in range(0, end-w+1, hop))
    for i in range(0, end-w+1, hop):
        if np.sum(echo[i:i+w]**2) > loud/1000 and erle(s['mic'], out, i, i+w) >= target: return (i+w)/fs
    return None

def snr(ref, x, a, b):
    r=ref[a:b].astype(float); d=x[a:b].astype(float)-r
    return 10*np.log10(np.sum(r**2)/max(np.sum(d**2),1e-9))

class MDF:  # speexdsp through ctypes (Debian's float build), for experiments
    def __init__(s, N, taps, fs):
        s.st = lib.speex_echo_state_init(N, taps); r = C.c_int(fs); lib.speex_echo_ctl(s.st, 24, C.byref(r)); s.N=N
        s.o = np.zeros(N, np.int16)
    def run(s, near, far):
        near = np.ascontiguousarray(near, np.int16); far = np.ascontiguousarray(far, np.int16)
        lib.speex_echo_cancellation(s.st, near.ctypes.data, far.ctypes.data, s.o.ctypes.data); return s.o.copy()

def report(name, s, out):
    fs=s['fs']; ns=int(s['near_start']*fs)
    e = erle(s['mic'], out, ns-4*fs, ns); c = convergence(s, out)
    print(f"{name}: ERLE {e:.1f} dB conv20 {c}", flush=True)
    return e, c
