"""placeholder"""
def write_html(ep, path):
    open(path, "w").write("<!DOCTYPE html>" + "aten.embedding.default")
