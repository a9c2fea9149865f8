# Seed 000's demo application: answers every request with MSG from the
# configuration file, read again on each request. The one change from the
# seed: CONFIG_FILE may point elsewhere than /config/config.cfg (for tests).
import os

from flask import Flask
app = Flask(__name__)
@app.route("/")
def hello():
    app.config.from_pyfile(os.environ.get('CONFIG_FILE', '/config/config.cfg'))
    return app.config['MSG']

if __name__ == "__main__":
    # Only for debugging while developing
    app.run(host='0.0.0.0', debug=True, port=80)
